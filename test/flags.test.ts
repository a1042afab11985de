// The five flags against the raw feed files: an address from each feed gets
// its flag, addresses outside every feed get none, and 100,000 seeded
// addresses carry exactly the flags a plain reading of the feeds gives them.
import t from 'tap';
import { openSnapshot } from '../src/index.js';
import { random, seededAddresses, v4Text } from '../bench/addresses.js';
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
