// Evidence on request: which sources list an address (table, source, listed
// prefix), from the JavaScript API, `ipr lookup --explain` and
// `POST /v1/check?explain=1`; it explains every flag and only the flags, and
// without explain every answer stays byte for byte what it was.
import t from 'tap';
import { seededAddresses } from '../bench/addresses.js';
import { openSnapshot, type Evidence } from '../src/index.js';
import { fullDataDir, runIpr } from './helpers.js';
import { ipValue } from './reference.js';
import { accountStore, accountWithKey, check, request, startServer } from './server.js';

const snapshot = openSnapshot(fullDataDir);
t.teardown(() => snapshot.close());

// 2.56.17.1: a /22 of the X4BNet VPN and datacenter lists, in AS9009 (M247), which their ASN lists name.
const M247 = '2.56.17.1';
const M247_EVIDENCE: Evidence[] = [
  { table: 'vpn', source: 'vpn-ipv4', prefix: '2.56.16.0/22' },
  { table: 'vpn', source: 'vpn-asns', prefix: '2.56.16.0/22', asn: 9009 },
  { table: 'hosting', source: 'datacenter-ipv4', prefix: '2.56.16.0/22' },
  { table: 'hosting', source: 'datacenter-asns', prefix: '2.56.16.0/22', asn: 9009 },
  { table: 'hosting', source: 'datacenter-asns-brianhama', prefix: '2.56.16.0/22', asn: 9009 },
  { table: 'hosting', source: 'datacenter-asns-oxl', prefix: '2.56.16.0/22', asn: 9009 },
  { table: 'hosting', source: 'datacenter-asns-umkus', prefix: '2.56.16.0/22', asn: 9009 },
];

t.test('explain(): the check result, then its evidence', async (t) => {
  const r = snapshot.explain(M247);
  t.same(Object.keys(r), [...Object.keys(snapshot.lookup(M247)), 'evidence'], 'evidence after the documented fields');
  t.same({ ...r, evidence: undefined }, { ...snapshot.lookup(M247), evidence: undefined });
  t.same(r.evidence, M247_EVIDENCE);
  // A Tor exit's IPv6 address stands for its /64 (widen_ipv6); the older exit list names the IPv4 one too.
  t.same(snapshot.explain('2620:7:6003::1234').evidence.filter((e) => e.table === 'tor'), [
    { table: 'tor', source: 'tor-exits', prefix: '2620:7:6003::/64' },
  ]);
  t.same(snapshot.explain('10.0.0.1').evidence, [], 'a special-purpose address: nothing, whatever a feed says');
  t.same(snapshot.explain('81.2.69.160').evidence, [], 'a residential address in no feed');
  t.throws(() => snapshot.explain('1.2.3'), { code: 'invalid_ip' });
  t.equal(snapshot.explainJson('1.2.3'), null);
});

t.test('the evidence explains every flag and only the flags, with prefixes that hold the address (20,000 seeded addresses)', async (t) => {
  const problems: string[] = [];
  for (const ip of seededAddresses(20_000, 5)) {
    const r = snapshot.explain(ip);
    const flagged = (['tor', 'vpn', 'proxy', 'relay', 'hosting'] as const).filter((f) => r[`is_${f}`]);
    const explained = [...new Set(r.evidence.map((e) => e.table))];
    if (JSON.stringify(flagged) !== JSON.stringify(explained)) problems.push(`${ip}: flags ${flagged}, evidence ${explained}`);
    const { value } = ipValue(r.ip.startsWith('::ffff:') && r.ip.includes('.') ? r.ip.slice(7) : r.ip);
    for (const e of r.evidence) {
      const [network, len] = e.prefix.split('/');
      const { v6, value: start } = ipValue(network!);
      const host = (v6 ? 128n : 32n) - BigInt(len!);
      if (value >> host !== start >> host) problems.push(`${ip}: ${e.prefix} does not hold it`);
      if (e.asn !== undefined && (e.asn !== r.asn?.number || e.prefix !== r.asn.route)) problems.push(`${ip}: ${JSON.stringify(e)} is not its ASN`);
    }
    const json = snapshot.explainJson(ip)!;
    if (json !== `${snapshot.lookupJson(ip)!.slice(0, -1)},"evidence":${JSON.stringify(r.evidence)}}`) problems.push(`${ip}: explainJson differs`);
  }
  t.same(problems.slice(0, 10), [], `${problems.length} problems`);
});

t.test('ipr lookup --explain adds the evidence; without it the output is unchanged', async (t) => {
  const explained = await runIpr('lookup', '--explain', M247, '--data', fullDataDir);
  t.equal(explained.code, 0);
  t.same(JSON.parse(explained.stdout), snapshot.explain(M247));
  const plain = await runIpr('lookup', M247, '--data', fullDataDir);
  t.equal(plain.stdout, `${JSON.stringify(snapshot.lookup(M247), null, 2)}\n`, 'byte for byte the answer without evidence');
  const both = await runIpr('lookup', '--explain', M247, 'nope', '--data', fullDataDir);
  t.equal(both.code, 1, 'an entry that is not an address: exit 1');
  t.same(JSON.parse(both.stdout), [snapshot.explain(M247), snapshot.lookupMany(['nope'])[0]]);
});

t.test('POST /v1/check?explain=1 adds the evidence; without it the bytes are the lookup JSON', async (t) => {
  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  const key = await accountWithKey(store, 'explain@example.com', 'enterprise');
  const ask = (query: string, ip: string) =>
    request(server.port, `/v1/check${query}`, {
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ip }),
    });
  for (const ip of [M247, '2620:7:6003::141', '::ffff:8.8.8.8', '192.168.1.1', '81.2.69.160']) {
    const explained = await ask('?explain=1', ip);
    t.equal(explained.status, 200, ip);
    t.equal(explained.text, snapshot.explainJson(ip), `${ip}: the check result, then evidence`);
    t.equal(explained.headers['x-ratelimit-limit'], '100', `${ip}: a check like any other (rate headers)`);
    const plain = await check(server.port, key, { ip });
    t.equal(plain.text, snapshot.lookupJson(ip), `${ip}: without explain, byte for byte the lookup JSON`);
    t.equal((await ask('?explain=0', ip)).text, plain.text, `${ip}: explain=0 is no explain`);
  }
  t.same((await ask('?explain=1', M247)).json.evidence, M247_EVIDENCE);
  const invalid = await ask('?explain=1', '1.2.3');
  t.same([invalid.status, invalid.json.error], [400, 'invalid_ip']);
});
