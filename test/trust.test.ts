// How far listings are believed (README "Sources", src/pipeline/trust.ts):
// listings of sources below trust 1 add up, and one alone counts only
// outside large networks (over 2^19 IPv4 addresses); asn-list sources the
// same per ASN; a copy older than its source's max_age is left out, also a
// last good copy that ages while its upstream fails; the configuration's
// checks of these fields.
import { utimesSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { startFeedServer } from '../bench/feed-server.js';
import { buildSnapshot, loadSources, openSnapshot } from '../src/index.js';
import { buildFrom, feeds, fixtureFile, fullDataDir, runIpr, testDir } from './helpers.js';

const ASN_IPV4 = { name: 'asn-ipv4', kind: 'asn', format: 'asn-csv', package: '@ip-location-db/asn/asn-ipv4.csv' };
// AS12389 (PJSC Rostelecom, 8,950,016 IPv4 addresses: large) holds 2.16.20.0/23;
// AS45839 (Shinjiru Technology, a hosting company: not large) holds 101.99.92.0/24;
// AS4766 (Korea Telecom: large) holds 1.96.0.0/12.
const ROSTELECOM = '2.16.20.1';
const SHINJIRU = '101.99.92.179';
const KOREA_TELECOM = '1.96.0.1';

t.test('weaker listings add up per prefix; one alone counts outside large networks only', async (t) => {
  const a = fixtureFile(t, 'a.txt', `${ROSTELECOM}\n2.16.20.2\n${SHINJIRU}\n2.16.20.4\n2.16.20.4\n`);
  const b = fixtureFile(t, 'b.txt', `${ROSTELECOM}\n`);
  const c = fixtureFile(t, 'c.txt', '2.16.20.2\n');
  const d = fixtureFile(t, 'd.txt', '2.16.20.3\n');
  const e = fixtureFile(t, 'e.txt', 'AS12389\nAS45839\nAS4766\n');
  const f = fixtureFile(t, 'f.txt', '4766\n');
  const { dataDir, summary } = await buildFrom(t, [
    ASN_IPV4,
    { name: 'a', kind: 'proxy', format: 'cidr-list', path: a, trust: 0.5 },
    { name: 'b', kind: 'proxy', format: 'cidr-list', path: b, trust: 0.5 },
    { name: 'c', kind: 'proxy', format: 'cidr-list', path: c, trust: 0.3 },
    { name: 'd', kind: 'proxy', format: 'cidr-list', path: d },
    { name: 'e', kind: 'hosting', format: 'asn-list', path: e, trust: 0.5 },
    { name: 'f', kind: 'hosting', format: 'asn-list', path: f, trust: 0.5 },
  ]);
  t.same(
    summary.sources.map((s) => [s.name, s.records, s.left_out ?? 0]),
    [
      ['asn-ipv4', 411961, 0],
      ['a', 5, 2], // 2.16.20.2 (0.5 + c's 0.3) and 2.16.20.4 (listed twice, counted once): alone in AS12389
      ['b', 1, 0],
      ['c', 1, 1],
      ['d', 1, 0],
      ['e', 3, 1], // AS12389
      ['f', 1, 0],
    ],
  );
  const s = openSnapshot(dataDir);
  t.teardown(() => s.close());
  const proxy = (ip: string) => s.explain(ip).is_proxy;
  t.equal(proxy(ROSTELECOM), true, 'a and b: 0.5 + 0.5');
  t.same(s.explain(ROSTELECOM).evidence, [
    { table: 'proxy', source: 'a', prefix: '2.16.20.1/32' },
    { table: 'proxy', source: 'b', prefix: '2.16.20.1/32' },
  ]);
  t.equal(proxy('2.16.20.2'), false, 'a and c: 0.8, in a large network');
  t.equal(proxy('2.16.20.4'), false, 'a twice is still 0.5');
  t.equal(proxy('2.16.20.3'), true, 'd has trust 1');
  t.equal(proxy(SHINJIRU), true, 'a alone, in a network that is not large');
  t.equal(s.lookup('2.16.20.5').is_hosting, false, 'AS12389: only e names it, and it is large');
  t.equal(s.lookup('101.99.92.1').is_hosting, true, 'AS45839: e alone, not large');
  t.same(s.explain(KOREA_TELECOM).evidence, [
    { table: 'hosting', source: 'e', prefix: '1.96.0.0/12', asn: 4766 },
    { table: 'hosting', source: 'f', prefix: '1.96.0.0/12', asn: 4766 },
  ]);
});

t.test('the rule on the real feeds: consumer ISPs named by one hosting list stay unflagged, listings left out are counted', async (t) => {
  const snapshot = openSnapshot(fullDataDir);
  t.teardown(() => snapshot.close());
  const leftOut = Object.fromEntries(snapshot.info().meta.sources.filter((s) => s.left_out !== undefined).map((s) => [s.name, s.left_out]));
  t.same(leftOut, {
    'tor-exits-2024-02': 231,
    'vpn-oxl-reports': 13590,
    'datacenter-asns-brianhama': 2,
    'datacenter-asns-oxl': 9,
    'datacenter-asns-umkus': 19,
    'datacenter-nets-oxl': 82069,
    'proxies-fyvri-https': 2352,
    'proxies-fyvri-socks4': 2952,
    'proxies-fyvri-socks5': 2517,
    'proxies-oxl-reports': 2220,
  });
  // One weaker list each names these large consumer ISPs: left out.
  for (const [ip, asn] of [
    [KOREA_TELECOM, 4766], // the Umkus list
    ['41.206.0.1', 29465], // MTN Nigeria: brianhama's list
    [ROSTELECOM, 12389], // the OXL ASN list
  ] as const) {
    const r = snapshot.explain(ip);
    t.same([r.asn?.number, r.is_hosting, r.evidence], [asn, false, []], ip);
  }
  // Two weaker lists name AS37963 (Alibaba, 16.9 million addresses): corroborated.
  t.same(
    snapshot.explain('47.113.151.23').evidence.filter((e) => e.table === 'hosting'),
    [
      { table: 'hosting', source: 'datacenter-asns-oxl', prefix: '47.112.0.0/13', asn: 37963 },
      { table: 'hosting', source: 'datacenter-asns-umkus', prefix: '47.112.0.0/13', asn: 37963 },
    ],
  );
});

t.test('a copy older than its max_age is left out of the build, with the reason', async (t) => {
  const file = fixtureFile(t, 'proxies.txt', 'socks5://144.31.222.106:7890\n');
  const threeDaysAgo = new Date(Date.now() - 3 * 86_400_000);
  utimesSync(file, threeDaysAgo, threeDaysAgo);
  const tor = path.join(feeds, 'tor/exit-nodes-2024-02.lst');
  const warnings: string[] = [];
  const config = [
    { name: 'tor', kind: 'tor', format: 'cidr-list', path: tor },
    { name: 'proxies', kind: 'proxy', format: 'proxy-list', path: file, max_age: '2d' },
  ];
  const dir = testDir(t);
  writeFileSync(path.join(dir, 'old.sources.json'), JSON.stringify({ sources: config }));
  const summary = await buildSnapshot({ sources: path.join(dir, 'old.sources.json'), dataDir: path.join(dir, 'old'), onWarning: (w) => warnings.push(w) });
  const stale = summary.sources.find((s) => s.name === 'proxies')!;
  t.match(stale, { records: 0, skipped: /its copy \(from .*\) is 3\.0 d old, more than its max_age of 2\.0 d/, modified_at: threeDaysAgo.toISOString() });
  t.match(warnings, [/source proxies: its copy .* max_age of 2\.0 d; building without it/]);
  const s = openSnapshot(path.join(dir, 'old'));
  t.teardown(() => s.close());
  t.equal(s.lookup('144.31.222.106').is_proxy, false);

  const { dataDir } = await buildFrom(t, [config[0]!, { ...config[1]!, max_age: '4d' }], 'young');
  const young = openSnapshot(dataDir);
  t.teardown(() => young.close());
  t.equal(young.lookup('144.31.222.106').is_proxy, true, 'within 4 days: used');
});

t.test('a last good copy ages while its upstream fails: past max_age, an update leaves it out', async (t) => {
  const server = await startFeedServer();
  t.teardown(() => server.close());
  server.route('/tor', { file: path.join(feeds, 'tor/exit-nodes-2024-02.lst') });
  server.route('/proxies', { file: path.join(feeds, 'proxy/proxies.txt') });
  const dir = testDir(t);
  const sourcesFile = path.join(dir, 'live.sources.json');
  writeFileSync(
    sourcesFile,
    JSON.stringify({
      sources: [
        { name: 'tor', kind: 'tor', format: 'cidr-list', url: server.url('/tor') },
        { name: 'proxies', kind: 'proxy', format: 'proxy-list', url: server.url('/proxies'), max_age: '2s' },
      ],
    }),
  );
  const dataDir = path.join(dir, 'data');
  const update = async () => JSON.parse((await runIpr('update', '--sources', sourcesFile, '--data', dataDir, '--json', '--retries', '0')).stdout);
  const lookup = async () => JSON.parse((await runIpr('lookup', '144.31.222.106', '--data', dataDir)).stdout).is_proxy;
  t.match(await update(), { result: 'published', sources: [{ status: 'downloaded' }, { status: 'downloaded' }] });
  t.equal(await lookup(), true);

  server.route('/proxies', { status: 500 });
  await sleep(2500); // the copy in hand is now older than 2 s
  const report = await update();
  t.match(report, {
    result: 'published',
    sources: [{ name: 'tor', status: 'not_modified' }, { name: 'proxies', status: 'skipped', reason: /is [2-9] s old, more than its max_age of 2 s/ }],
  });
  t.equal(await lookup(), false, 'the stale proxies are no longer served');
});

t.test('the configuration checks trust, max_age, widen_ipv6 and dns_servers', async (t) => {
  const bad: [Record<string, unknown>, RegExp][] = [
    [{ kind: 'proxy', format: 'proxy-list', trust: 0 }, /trust must be a number above 0 and at most 1, on a flag kind/],
    [{ kind: 'proxy', format: 'proxy-list', trust: 1.5 }, /trust must be/],
    [{ kind: 'asn', format: 'asn-csv', trust: 0.5 }, /trust must be/],
    [{ kind: 'proxy', format: 'proxy-list', max_age: 'soon' }, /max_age must be a duration such as "36h" or "2d"/],
    [{ kind: 'tor', format: 'cidr-list', widen_ipv6: 16 }, /widen_ipv6 must be a prefix length from 32 to 128, on a flag kind/],
    [{ kind: 'vpn', format: 'cidr-list', dns_servers: ['127.0.0.1'] }, /dns_servers must be a list of addresses, on a source of host names/],
  ];
  for (const [fields, message] of bad) {
    const file = fixtureFile(t, 'bad.sources.json', JSON.stringify({ sources: [{ name: 'x', path: 'x.txt', ...fields }] }));
    t.throws(() => loadSources(file), { code: 'sources_invalid', message }, JSON.stringify(fields));
  }
  const file = fixtureFile(t, 'good.sources.json', JSON.stringify({ sources: [{ name: 'x', kind: 'proxy', format: 'proxy-list', path: 'x.txt', trust: 0.5, max_age: '36h' }] }));
  t.match(loadSources(file).sources[0], { trust: 0.5, maxAgeMs: 36 * 3_600_000 });
});
