// The five flags against the raw feed files: an address from each feed gets
// its flag, addresses outside every feed get none, and 100,000 seeded
// addresses (and 40,000 more inside the feeds weighed by trust) carry
// exactly the flags a plain reading of the feeds and README's trust rule
// gives them (test/reference.ts).
import { readFileSync } from 'node:fs';
import t from 'tap';
import { openSnapshot } from '../src/index.js';
import { inside, random, seededAddresses, v4Text } from '../bench/addresses.js';
import { feeds, fullDataDir } from './helpers.js';
import { FeedReference, loadAsnRows, type Flag } from './reference.js';

const snapshot = openSnapshot(fullDataDir);
t.teardown(() => snapshot.close());
const reference = new FeedReference(feeds, loadAsnRows('asn-ipv4-num.csv'), loadAsnRows('asn-ipv6-num.csv'));

function flagsOf(ip: string): Record<Flag, boolean> {
  const r = snapshot.lookup(ip);
  return { tor: r.is_tor, vpn: r.is_vpn, proxy: r.is_proxy, relay: r.is_relay, hosting: r.is_hosting };
}

t.test('an address from each feed gets its flag', async (t) => {
  const samples: [Flag, string][] = [
    ['tor', '185.220.101.1'],
    ['tor', '2620:7:6003::141'],
    ['vpn', '2.26.157.77'],
    ['vpn', '2001:550:1d05::77'],
    ['vpn', '2.56.16.1'], // AS9009, an ASN of vpn/asn.txt
    ['proxy', '144.31.222.106'],
    ['relay', '104.28.28.76'],
    ['relay', '2a02:26f7:b3c0:4000::1'],
    ['hosting', '1.12.0.1'],
    ['hosting', '2001:310::1'],
    ['hosting', '3.5.140.1'], // Amazon's list
    ['vpn', '2.56.190.2'], // NordVPN's list
    ['vpn', '2001:ac8:a:f::f001'], // Mullvad's list, IPv6
    ['vpn', '149.22.83.100'], // IVPN's servers.json
    ['vpn', '102.165.0.100'], // OXL reports (trust 0.5) alone, in AS61317 (Hivelocity, not a large network)
    ['proxy', '103.161.130.154'], // fyvri (trust 0.5) under one protocol, in a small network
    ['proxy', '156.225.72.2'], // fyvri under two protocols (0.5 + 0.5) in AS17561, a large network
    ['tor', '101.99.92.179'], // the 2024 exit list (trust 0.5), in AS45839 (not large)
    ['tor', '2620:7:6003::1234'], // the /64 of the exit 2620:7:6003::141 (widen_ipv6)
    ['hosting', '8.25.82.1'], // AS24429 (Taobao): only the OXL ASN list (trust 0.5) names it, 212,224 IPv4 addresses
    ['hosting', '1.82.220.1'], // OXL's hosting /24s (trust 0.5) in a network that is not large
  ];
  for (const [flag, ip] of samples) {
    t.equal(reference.flags(ip)[flag], true, `${ip} is in the ${flag} feeds`);
    t.equal(flagsOf(ip)[flag], true, `${ip} is_${flag}`);
  }
});

t.test('addresses outside every feed get no flag', async (t) => {
  const next = random(99);
  let outside = 0;
  for (let i = 0; outside < 2000 && i < 100_000; i++) {
    const ip = v4Text(next());
    const expected = reference.flags(ip);
    if (Object.values(expected).some(Boolean)) continue;
    outside++;
    const got = flagsOf(ip);
    if (Object.values(got).some(Boolean)) t.fail(`${ip} is in no feed but flagged ${JSON.stringify(got)}`);
  }
  t.equal(outside, 2000, '2,000 addresses outside every feed, none flagged');
});

t.test('100,000 seeded addresses carry exactly the reference flags', async (t) => {
  const mismatches: string[] = [];
  const counts: Record<Flag, number> = { tor: 0, vpn: 0, proxy: 0, relay: 0, hosting: 0 };
  for (const ip of seededAddresses(100_000, 7)) {
    const expected = reference.flags(ip);
    const got = flagsOf(ip);
    for (const f of Object.keys(counts) as Flag[]) if (expected[f]) counts[f]++;
    if (JSON.stringify(expected) !== JSON.stringify(got)) mismatches.push(`${ip}: ${JSON.stringify(got)} vs ${JSON.stringify(expected)}`);
  }
  t.same(mismatches.slice(0, 10), [], `${mismatches.length} mismatches`);
  for (const [flag, n] of Object.entries(counts)) t.ok(n > 100, `${n} addresses flagged ${flag}`);
});

t.test('40,000 seeded addresses inside the feeds weighed by trust carry exactly the reference flags', async (t) => {
  // Lines of the sources below trust 1 (and of the provider lists), where
  // the trust rule decides: an address of the line itself or beside it.
  const files = [
    'vpn/oxl-risk-db-vpn.txt',
    'proxy/oxl-risk-db-proxy.txt',
    'proxy/fyvri/socks4.txt',
    'datacenter/oxl-risk-db-net-hosting.txt',
    'tor/exit-nodes-2024-02.lst',
    'vpn-providers/nordvpn.txt',
    'vpn-providers/airvpn.txt',
  ];
  const prefixes = files.flatMap((f) =>
    readFileSync(`${feeds}/${f}`, 'utf8')
      .split('\n')
      .map((l) => l.trim().replace(/^([0-9.]+):[0-9]+$/, '$1')) // fyvri's ip:port
      .filter((l) => l !== '' && !l.startsWith('#')),
  );
  const next = random(11);
  const mismatches: string[] = [];
  for (let i = 0; i < 40_000; i++) {
    const line = prefixes[next() % prefixes.length]!;
    const ip = line.includes('/') || next() % 2 === 0 ? inside(line.includes('/') ? line : line.includes(':') ? `${line}/120` : `${line}/30`, next) : line;
    const expected = reference.flags(ip);
    const got = flagsOf(ip);
    if (JSON.stringify(expected) !== JSON.stringify(got)) mismatches.push(`${ip}: ${JSON.stringify(got)} vs ${JSON.stringify(expected)}`);
  }
  t.same(mismatches.slice(0, 10), [], `${mismatches.length} mismatches`);
});
