// `ipr export --format mmdb` of the full real-data snapshot, read back by
// the readers people use: mmdb-lib (what the `maxmind` package runs) and
// libmaxminddb's `mmdblookup` (Debian mmdb-bin). Both must answer what
// `ipr lookup` answers, on seeded addresses (bench/addresses.js) and on the
// boundaries of the real ranges (first and last address of feed prefixes and
// ASN rows, and their neighbours), IPv4 and IPv6. The documented differences:
//   1. a null field of the check result is absent (MaxMind DB has no null),
//      `ip` and `asn.route` are not there, and the GeoIP2 paths are added;
//   2. ::/96 and 2002::/16 answer as the IPv4 address they carry, as in
//      MaxMind's databases (::ffff:0:0/96 already does in `ipr lookup`).
import { execFile, spawnSync } from 'node:child_process';
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { Reader } from 'mmdb-lib';
import t from 'tap';
import { random, seededAddresses, asnV6Ranges, feedPrefixes } from '../bench/addresses.js';
import { openSnapshot, type CheckResult } from '../src/index.js';
import { METADATA_MARKER, openMmdb } from '../src/pipeline/mmdb.js';
import { MMDB_DATABASE_TYPE } from '../src/pipeline/mmdb-export.js';
import { cli, fullDataDir, testDir } from './helpers.js';
import { ipValue, loadAsnRows, text } from './reference.js';

const { default: Decoder } = createRequire(import.meta.url)('mmdb-lib/lib/decoder') as {
  default: new (db: Buffer, base: number) => { decode(offset: number): { value: unknown } };
};

const SEEDED = 200_000;
const VIA_MMDBLOOKUP = 6_000;

/** The record the export should hold for a check result (rule 1), written out plainly. */
function expectedRecord(r: CheckResult): Record<string, unknown> {
  const present = (o: object) => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== null));
  const out: Record<string, unknown> = {
    is_vpn: r.is_vpn,
    is_proxy: r.is_proxy,
    is_tor: r.is_tor,
    is_relay: r.is_relay,
    is_hosting: r.is_hosting,
    risk_score: r.risk_score,
    recommendation: r.recommendation,
  };
  if (r.company) out.company = present(r.company);
  if (r.location) out.location = present(r.location);
  if (r.asn) out.asn = present({ number: r.asn.number, name: r.asn.name });
  const l = r.location;
  if (l?.country) out.country = l.country_name ? { iso_code: l.country, names: { en: l.country_name } } : { iso_code: l.country };
  if (l?.city) out.city = { names: { en: l.city } };
  if (l?.region) out.subdivisions = [{ names: { en: l.region } }];
  if (r.asn) out.autonomous_system_number = r.asn.number;
  if (r.asn?.name) out.autonomous_system_organization = r.asn.name;
  if (r.is_vpn || r.is_proxy || r.is_tor || r.is_relay || r.is_hosting) out.is_anonymous = true;
  if (r.is_vpn) out.is_anonymous_vpn = true;
  if (r.is_hosting) out.is_hosting_provider = true;
  if (r.is_proxy) out.is_public_proxy = true;
  if (r.is_tor) out.is_tor_exit_node = true;
  return out;
}

/** The address `ipr lookup` is asked for `ip` (rule 2). */
function lookedUpAs(ip: string): string {
  const { v6, value } = ipValue(ip);
  if (v6 && value < 1n << 32n) return text(value, false);
  if (v6 && value >> 112n === 0x2002n) return text((value >> 80n) & 0xffffffffn, false);
  return ip;
}

/** First and last addresses of a seeded sample of real ranges, and the addresses either side. */
function boundaryAddresses(count: number, seed: number): string[] {
  const next = random(seed);
  const ranges: { v6: boolean; first: bigint; last: bigint }[] = [];
  const feeds = feedPrefixes();
  for (let i = 0; i < count; i++) {
    const [address, len] = feeds[next() % feeds.length]!.split('/');
    const { v6, value } = ipValue(address!);
    const host = BigInt((v6 ? 128 : 32) - Number(len ?? (v6 ? 128 : 32)));
    const first = (value >> host) << host;
    ranges.push({ v6, first, last: first + (1n << host) - 1n });
  }
  const rows4 = loadAsnRows('asn-ipv4-num.csv');
  const rows6 = asnV6Ranges();
  for (let i = 0; i < count; i++) {
    const row = rows4[next() % rows4.length]!;
    ranges.push({ v6: false, first: row.first, last: row.last });
    const [first, last] = rows6[next() % rows6.length]!;
    ranges.push({ v6: true, first, last });
  }
  const top = (v6: boolean) => (v6 ? (1n << 128n) - 1n : 0xffffffffn);
  return ranges.flatMap(({ v6, first, last }) =>
    [first - 1n, first, last, last + 1n].filter((v) => v >= 0n && v <= top(v6)).map((v) => text(v, v6)),
  );
}

/** The edges of the IPv4 subtree and its aliases, and addresses inside them (::808:808 is ::8.8.8.8). */
const CARVE_EDGES = [
  '::', '::1', '::100', '::ffff:ffff', '::1:0:0', '::808:808', '::cc08:608d',
  '::fffe:ffff:ffff', '::ffff:0:0', '::ffff:808:808', '::ffff:ffff:ffff', '::1:0:0:0',
  '2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff', '2002::', '2002:808:808::', '2002:cc08:608d:1::1', '2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff', '2003::',
  '0.0.0.0', '255.255.255.255', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff',
];

/**
 * mmdblookup's dump of a value (libmaxminddb's MMDB_dump_entry_data_list):
 * one item a line, `"key":` lines, `{ } [ ]`, and `value <type>`; strings
 * are printed between quotes, unescaped.
 */
function parseDump(dump: string): unknown {
  const stack: { value: unknown[] | Record<string, unknown>; key: string | null }[] = [];
  let result: unknown;
  const put = (value: unknown) => {
    const top = stack[stack.length - 1];
    if (top === undefined) result = value;
    else if (Array.isArray(top.value)) top.value.push(value);
    else top.value[top.key!] = value;
  };
  for (const raw of dump.split('\n')) {
    const line = raw.trim();
    if (line === '') continue;
    const key = /^"(.*)": ?$/.exec(line);
    const value = /^(.*) <([a-z0-9_]+)>$/.exec(line);
    if (key) {
      stack[stack.length - 1]!.key = key[1]!;
    } else if (line === '{' || line === '[') {
      const container = line === '{' ? {} : [];
      put(container);
      stack.push({ value: container, key: null });
    } else if (line === '}' || line === ']') {
      stack.pop();
    } else if (value) {
      const [, v, type] = value;
      if (type === 'utf8_string') put(v!.slice(1, -1));
      else if (type === 'boolean') put(v === 'true');
      else put(Number(v));
    } else {
      throw new Error(`unexpected mmdblookup line: ${line}`);
    }
  }
  return result;
}

/** Doubles as mmdblookup prints them (six decimals) and as stored compare equal at the 4 places ipr keeps. */
function roundDegrees(record: unknown): unknown {
  const r = record as { location?: { latitude?: number; longitude?: number } };
  for (const k of ['latitude', 'longitude'] as const) {
    if (r.location?.[k] !== undefined) r.location[k] = Math.round(r.location[k]! * 1e4) / 1e4;
  }
  return record;
}

t.test('the export answers what ipr lookup answers, read by mmdb-lib and by libmaxminddb', async (t) => {
  const out = path.join(testDir(t), 'ipr.mmdb');
  const exported = spawnSync(process.execPath, [cli, 'export', '--format', 'mmdb', '--data', fullDataDir, '--out', out], { encoding: 'utf8' });
  t.equal(exported.status, 0, exported.stderr);
  t.match(exported.stdout, /^file\s+.*ipr\.mmdb\n/);
  t.match(exported.stdout, /\ntree\s+[0-9,]+ nodes, 28-bit records\n/, 'the node count and data size need 28-bit records');
  const answers = Number(/\nrecords\s+([0-9,]+) distinct answers/.exec(exported.stdout)![1]!.replace(/,/g, ''));
  t.same(readdirSync(testDir(t)), ['ipr.mmdb'], 'no partial file left');

  const file = readFileSync(out);
  const reader = new Reader<Record<string, unknown>>(file);
  const snapshot = openSnapshot(fullDataDir);
  t.teardown(() => snapshot.close());
  const info = snapshot.info();

  t.test('metadata: the format, the build and the sources with their licenses', async (t) => {
    t.match(reader.metadata, {
      binaryFormatMajorVersion: 2,
      binaryFormatMinorVersion: 0,
      ipVersion: 6,
      recordSize: 28,
      databaseType: MMDB_DATABASE_TYPE,
      languages: ['en'],
      buildEpoch: new Date(Math.floor(Date.parse(info.built_at) / 1000) * 1000),
    });
    for (const source of info.meta.sources) t.ok(reader.metadata.description.en!.includes(`${source.name} (${source.license})`), source.name);
    // The metadata map holds our own keys too; mmdb-lib's parser keeps only the standard ones: decode it whole.
    const at = file.lastIndexOf(METADATA_MARKER) + METADATA_MARKER.length;
    const metadata = new Decoder(file, at).decode(at).value as Record<string, unknown>;
    t.same(metadata.ipr_snapshot, { file: path.basename(info.path), built_at: info.built_at, checksum: info.checksum, builder: info.meta.builder });
    t.same(
      metadata.ipr_sources,
      info.meta.sources.map((s) => ({ name: s.name, kind: s.kind, location: s.location, license: s.license })),
    );
    const verbose = spawnSync('mmdblookup', ['--verbose', '--file', out, '--ip', '8.8.8.8'], { encoding: 'utf8' });
    t.match(verbose.stdout, new RegExp(`Type:\\s+${MMDB_DATABASE_TYPE}`));
    t.match(verbose.stdout, /Record size:\s+28 bits/);
    t.match(verbose.stdout, /IP version:\s+IPv6/);
    t.match(verbose.stdout, new RegExp(`Build epoch:\\s+${Math.floor(Date.parse(info.built_at) / 1000)} `));
  });

  const seeded = seededAddresses(SEEDED, 1212);
  const boundaries = boundaryAddresses(3_000, 77);
  const addresses = [...CARVE_EDGES, ...boundaries, ...seeded];
  const results = snapshot.lookupMany(addresses.map(lookedUpAs));
  const expected = results.map((r) => expectedRecord(r as CheckResult));

  t.test(`mmdb-lib: ${addresses.length.toLocaleString('en-US')} addresses (${boundaries.length.toLocaleString('en-US')} on boundaries)`, async (t) => {
    const mismatches: string[] = [];
    addresses.forEach((ip, i) => {
      const got = reader.get(ip);
      if (!isDeepStrictEqual(got, expected[i])) mismatches.push(`${ip}: ${JSON.stringify(got)} != ${JSON.stringify(expected[i])}`);
    });
    t.same(mismatches.slice(0, 5), [], `${mismatches.length} mismatches`);
    const [, v4Length] = reader.getWithPrefixLength('8.8.8.8');
    t.equal(reader.getWithPrefixLength('::ffff:8.8.8.8')[1], 96 + v4Length, '::ffff:0:0/96 leads into the IPv4 subtree');
    t.equal(reader.getWithPrefixLength('2002:808:808::1')[1], 16 + v4Length, '2002::/16 leads into the IPv4 subtree');
  });

  t.test(`mmdblookup: ${VIA_MMDBLOOKUP.toLocaleString('en-US')} of them, the carve edges and boundaries first`, async (t) => {
    // One process per address: two shell loops side by side, each printing a
    // line before each dump.
    const chosen = addresses.slice(0, VIA_MMDBLOOKUP);
    const loop = 'while read -r ip; do echo "== $ip"; mmdblookup --file "$1" --ip "$ip" || echo "mmdblookup failed"; done';
    const halves = [chosen.slice(0, chosen.length / 2), chosen.slice(chosen.length / 2)];
    const outputs = await Promise.all(
      halves.map((half) => {
        const child = execFile('sh', ['-c', loop, 'sh', out], { maxBuffer: 1 << 28 });
        child.stdin!.end(`${half.join('\n')}\n`);
        return new Promise<string>((resolve, reject) => {
          let text = '';
          child.stdout!.on('data', (d) => (text += d));
          child.once('error', reject);
          child.once('close', () => resolve(text));
        });
      }),
    );
    const dumps = outputs.join('').split(/^== /m).slice(1);
    t.equal(dumps.length, chosen.length);
    const mismatches: string[] = [];
    chosen.forEach((ip, i) => {
      const [head, ...body] = dumps[i]!.split('\n');
      const got = head === ip ? roundDegrees(parseDump(body.join('\n'))) : `the dump of ${head}`;
      if (!isDeepStrictEqual(got, expected[i])) mismatches.push(`${ip}: ${JSON.stringify(got)} != ${JSON.stringify(expected[i])}`);
    });
    t.same(mismatches.slice(0, 5), [], `${mismatches.length} mismatches`);
  });

  t.test("the first and last address of every 500th of the export's own networks", async (t) => {
    // The export's networks are the snapshot's answer space cut at the
    // aliases: at each one's edges ipr's answer changes, or the network is
    // a piece of a larger one. Walked with our importer's walker.
    const edges: string[] = [];
    let n = 0;
    openMmdb(file, out).walk((family, address, len) => {
      if (n++ % 500 !== 0) return;
      const width = family === 4 ? 32 : 128;
      let first = 0n;
      for (const byte of address) first = (first << 8n) | BigInt(byte);
      edges.push(text(first, family === 6), text(first | ((1n << BigInt(width - len)) - 1n), family === 6));
    });
    t.ok(edges.length > 50_000, `${edges.length.toLocaleString('en-US')} addresses of ${n.toLocaleString('en-US')} networks`);
    const answers = snapshot.lookupMany(edges.map(lookedUpAs));
    const mismatches = edges.filter((ip, i) => !isDeepStrictEqual(reader.get(ip), expectedRecord(answers[i] as CheckResult)));
    t.same(mismatches.slice(0, 5), [], `${mismatches.length} mismatches`);
  });

  t.test('every distinct answer is one record of the data section', async (t) => {
    // Walk every network (our importer's walker), take the first network of
    // each record and ask ipr for its answer: as many answers as records,
    // and no answer twice.
    const mmdb = openMmdb(file, out);
    const first = new Map<number, string>();
    mmdb.walk((family, address, _len, offset) => {
      if (first.has(offset)) return;
      const groups = family === 4 ? [...address] : [0, 1, 2, 3, 4, 5, 6, 7].map((i) => ((address[2 * i]! << 8) | address[2 * i + 1]!).toString(16));
      first.set(offset, groups.join(family === 4 ? '.' : ':'));
    });
    t.equal(first.size, answers, 'the networks point at as many records as the export wrote');
    // An answer's text, with each company and location object put in text once.
    const texts = new Map<object, string>();
    const textOf = (o: object | null) => {
      if (o === null) return 'null';
      let text = texts.get(o);
      if (text === undefined) texts.set(o, (text = JSON.stringify(o)));
      return text;
    };
    const distinct = new Set(
      snapshot.lookupMany([...first.values()]).map((r) => {
        const { ip: _ip, company, location, asn, ...flags } = r as CheckResult;
        return `${Object.values(flags).join()} ${textOf(company)} ${textOf(location)} ${asn?.number} ${asn?.name}`;
      }),
    );
    t.equal(distinct.size, first.size, 'no two records hold the same answer');
  });
});

t.test('bad arguments and destinations are refused; a failed export replaces nothing', async (t) => {
  const dir = testDir(t);
  const ipr = (...args: string[]) => spawnSync(process.execPath, [cli, 'export', ...args], { encoding: 'utf8' });
  const out = path.join(dir, 'kept.mmdb');
  writeFileSync(out, 'an earlier export');
  t.match(ipr('--out', out, '--data', fullDataDir), { status: 2, stderr: /export needs --format \(mmdb\)/ });
  t.match(ipr('--format', 'csv', '--out', out, '--data', fullDataDir), { status: 2, stderr: /export --format takes mmdb, not "csv"/ });
  t.match(ipr('--format', 'mmdb', '--data', fullDataDir), { status: 2, stderr: /export needs --out FILE/ });
  t.match(ipr('--format', 'mmdb', '--out', out, 'extra'), { status: 2, stderr: /Unexpected argument 'extra'/ });
  t.match(ipr('--format', 'mmdb', '--out', path.join(dir, 'missing', 'x.mmdb'), '--data', fullDataDir), { status: 1, stderr: /the folder .*missing does not exist/ });
  t.match(ipr('--format', 'mmdb', '--out', dir, '--data', fullDataDir), { status: 1, stderr: /is a folder; --out takes a file name/ });
  t.match(ipr('--format', 'mmdb', '--out', out, '--data', path.join(dir, 'no-data')), { status: 1, stderr: /ipr: data folder .*no-data does not exist/ });
  t.equal(readFileSync(out, 'utf8'), 'an earlier export');
  t.same(readdirSync(dir).sort(), ['kept.mmdb']);
});
