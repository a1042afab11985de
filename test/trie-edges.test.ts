// Longest-prefix matching at its edges: /0, /32, /128, nested and adjacent
// prefixes, overlapping ranges, the first and last address of every range,
// IPv4-mapped IPv6. Each source names its own company, so an answer tells
// which prefix matched.
import t from 'tap';
import { openSnapshot, type Snapshot } from '../src/index.js';
import { buildFrom, fixtureFile, type SourceSpec } from './helpers.js';

function source(t: Parameters<typeof fixtureFile>[0], name: string, lines: string[]): SourceSpec {
  return {
    name,
    kind: 'hosting',
    format: 'cidr-list',
    path: fixtureFile(t, `${name}.txt`, `${lines.join('\n')}\n`),
    company: { name, type: 'hosting', domain: `${name}.example` },
  };
}

function matched(snapshot: Snapshot, ip: string): string | null {
  return snapshot.lookup(ip).company?.name ?? null;
}

t.test('nested IPv4 prefixes: the most specific wins, at every boundary', async (t) => {
  const { dataDir } = await buildFrom(t, [
    source(t, 'slash8', ['20.0.0.0/8']),
    source(t, 'slash16', ['20.1.0.0/16']),
    source(t, 'slash24', ['20.1.2.0/24']),
    source(t, 'slash32', ['20.1.2.3/32']),
  ]);
  const s = openSnapshot(dataDir);
  t.teardown(() => s.close());
  const expected: [string, string | null][] = [
    ['19.255.255.255', null],
    ['20.0.0.0', 'slash8'],
    ['20.0.255.255', 'slash8'],
    ['20.1.0.0', 'slash16'],
    ['20.1.1.255', 'slash16'],
    ['20.1.2.0', 'slash24'],
    ['20.1.2.2', 'slash24'],
    ['20.1.2.3', 'slash32'],
    ['20.1.2.4', 'slash24'],
    ['20.1.2.255', 'slash24'],
    ['20.1.3.0', 'slash16'],
    ['20.1.255.255', 'slash16'],
    ['20.2.0.0', 'slash8'],
    ['20.255.255.255', 'slash8'],
    ['21.0.0.0', null],
    ['::ffff:20.1.2.3', 'slash32'], // IPv4-mapped: the IPv4 answer
    ['::ffff:20.1.2.4', 'slash24'],
  ];
  for (const [ip, name] of expected) t.equal(matched(s, ip), name, ip);
  t.equal(s.lookup('::ffff:20.1.2.3').ip, '::ffff:20.1.2.3');
  t.equal(s.lookup('::FFFF:1401:0203').ip, '::ffff:20.1.2.3');
  t.equal(s.lookup('::ffff:20.1.2.3').is_hosting, true);
});

t.test('/0 covers every public address; special-purpose space stays empty', async (t) => {
  const { dataDir } = await buildFrom(t, [
    source(t, 'everything', ['0.0.0.0/0', '::/0']),
    source(t, 'host', ['2001:4860:4860::8888/128', '8.8.8.8']),
  ]);
  const s = openSnapshot(dataDir);
  t.teardown(() => s.close());
  for (const ip of ['1.0.0.0', '8.8.8.7', '8.8.8.9', '223.255.255.255', '2001:4860:4860::8887', '2001:4860:4860::8889', '2c0f:ffff:ffff:ffff:ffff:ffff:ffff:ffff']) {
    t.equal(matched(s, ip), 'everything', ip);
  }
  t.equal(matched(s, '8.8.8.8'), 'host', '/32');
  t.equal(matched(s, '2001:4860:4860::8888'), 'host', '/128');
  // docs/API.md: special-purpose addresses answer nothing, whatever a feed says.
  for (const ip of ['0.0.0.0', '10.0.0.1', '100.64.0.1', '127.0.0.1', '169.254.1.1', '172.16.0.1', '192.0.2.1', '192.168.1.1', '198.18.0.1', '198.51.100.1', '203.0.113.1', '224.0.0.1', '240.0.0.1', '255.255.255.255', '::', '::1', '::1.2.3.4', 'fc00::1', 'fe80::1', 'ff02::1', '2001:db8::1', '::ffff:10.0.0.1']) {
    const r = s.lookup(ip);
    t.same(
      [r.is_vpn, r.is_proxy, r.is_tor, r.is_relay, r.is_hosting, r.risk_score, r.recommendation, r.company, r.location, r.asn],
      [false, false, false, false, false, 0, 'allow', null, null, null],
      `${ip} is special-purpose`,
    );
  }
});

t.test('adjacent prefixes and overlapping ranges', async (t) => {
  const { dataDir } = await buildFrom(t, [
    source(t, 'left', ['30.0.0.0/24', '40.0.0.10-40.0.0.20']),
    source(t, 'right', ['30.0.1.0/24', '40.0.0.15-40.0.0.30']),
  ]);
  const s = openSnapshot(dataDir);
  t.teardown(() => s.close());
  t.equal(matched(s, '29.255.255.255'), null);
  t.equal(matched(s, '30.0.0.0'), 'left');
  t.equal(matched(s, '30.0.0.255'), 'left');
  t.equal(matched(s, '30.0.1.0'), 'right');
  t.equal(matched(s, '30.0.1.255'), 'right');
  t.equal(matched(s, '30.0.2.0'), null);
  // Ranges become exact prefixes, then the longest prefix wins:
  // left = .10/31 .12/30 .16/30 .20/32, right = .15/32 .16/29 .24/30 .28/31 .30/32.
  const expected: [number, string | null][] = [
    [9, null], [10, 'left'], [14, 'left'], [15, 'right'], [16, 'left'], [19, 'left'],
    [20, 'left'], [21, 'right'], [23, 'right'], [24, 'right'], [30, 'right'], [31, null],
  ];
  for (const [last, name] of expected) t.equal(matched(s, `40.0.0.${last}`), name, `40.0.0.${last}`);
});

t.test('nested IPv6 prefixes, first and last addresses', async (t) => {
  const { dataDir } = await buildFrom(t, [
    source(t, 'v6-12', ['2400::/12']),
    source(t, 'v6-32', ['2400:cb00::/32']),
    source(t, 'v6-48', ['2400:cb00:2048::/48']),
    source(t, 'v6-range', ['2a00:1450:4001:800::-2a00:1450:4001:80f:ffff:ffff:ffff:ffff']),
  ]);
  const s = openSnapshot(dataDir);
  t.teardown(() => s.close());
  const expected: [string, string | null][] = [
    ['23ff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', null],
    ['2400::', 'v6-12'],
    ['240f:ffff:ffff:ffff:ffff:ffff:ffff:ffff', 'v6-12'],
    ['2410::', null],
    ['2400:cb00::', 'v6-32'],
    ['2400:cb00:2047:ffff:ffff:ffff:ffff:ffff', 'v6-32'],
    ['2400:cb00:2048::', 'v6-48'],
    ['2400:cb00:2048:ffff:ffff:ffff:ffff:ffff', 'v6-48'],
    ['2400:cb00:2049::', 'v6-32'],
    ['2400:cb00:ffff:ffff:ffff:ffff:ffff:ffff', 'v6-32'],
    ['2400:cb01::', 'v6-12'],
    ['2a00:1450:4001:7ff:ffff:ffff:ffff:ffff', null],
    ['2a00:1450:4001:800::', 'v6-range'],
    ['2a00:1450:4001:80f:ffff:ffff:ffff:ffff', 'v6-range'],
    ['2a00:1450:4001:810::', null],
  ];
  for (const [ip, name] of expected) t.equal(matched(s, ip), name, ip);
});

t.test('ASN routes: a range becomes its exact prefixes; the route is the one holding the address', async (t) => {
  const csv = fixtureFile(
    t,
    'asn.csv',
    ['50.0.0.0,50.0.0.255,64500,"Example, Inc."', '50.0.1.0,50.0.2.255,64501,Range Two', '2001:67c::,2001:67c:0:1:ffff:ffff:ffff:ffff,64502,V6 Org', ''].join('\n'),
  );
  const { dataDir } = await buildFrom(t, [{ name: 'asn', kind: 'asn', format: 'asn-csv', path: csv }]);
  const s = openSnapshot(dataDir);
  t.teardown(() => s.close());
  t.same(s.lookup('50.0.0.0').asn, { number: 64500, name: 'Example, Inc.', route: '50.0.0.0/24' });
  t.same(s.lookup('50.0.0.255').asn, { number: 64500, name: 'Example, Inc.', route: '50.0.0.0/24' });
  t.same(s.lookup('50.0.1.9').asn, { number: 64501, name: 'Range Two', route: '50.0.1.0/24' });
  t.same(s.lookup('50.0.2.7').asn, { number: 64501, name: 'Range Two', route: '50.0.2.0/24' });
  t.same(s.lookup('::ffff:50.0.2.7').asn, { number: 64501, name: 'Range Two', route: '50.0.2.0/24' });
  t.equal(s.lookup('50.0.3.0').asn, null);
  t.same(s.lookup('2001:67c:0:1:abcd::1').asn, { number: 64502, name: 'V6 Org', route: '2001:67c::/63' });
  // Without a flag source naming one, the company is the ASN's, typed by its name.
  t.same(s.lookup('50.0.0.1').company, { name: 'Example, Inc.', type: 'business', domain: null });
});
