// The VPN providers' own server lists: each API format on a real response
// of that API (../shared/data/feeds/vpn-providers/api-samples), record
// counts, addresses in and out, and the provider as the company of its
// servers in place of the hosting company (here and on the full snapshot).
import { readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { openSnapshot } from '../src/index.js';
import { buildFrom, feeds, fixtureFile, fullDataDir } from './helpers.js';

const samples = path.join(feeds, 'vpn-providers', 'api-samples');

t.test('each provider API format on its real response', async (t) => {
  const { dataDir, summary } = await buildFrom(t, [
    { name: 'mullvad', kind: 'vpn', format: 'mullvad-relays', path: path.join(samples, 'mullvad.json') },
    { name: 'nordvpn', kind: 'vpn', format: 'nordvpn-servers', path: path.join(samples, 'nordvpn.json') },
    { name: 'protonvpn', kind: 'vpn', format: 'protonvpn-logicals', path: path.join(samples, 'protonvpn.json') },
    { name: 'pia', kind: 'vpn', format: 'pia-servers', path: path.join(samples, 'pia.json') },
    { name: 'ivpn', kind: 'vpn', format: 'ivpn-servers', path: path.join(samples, 'ivpn.json') },
  ]);
  t.same(
    summary.sources.map((s) => [s.name, s.records, s.bad_lines]),
    [
      ['mullvad', 10, 0], // 4 WireGuard relays with IPv4 and IPv6, 2 OpenVPN relays with IPv4
      ['nordvpn', 1, 0], // station; ipv6_station is empty
      ['protonvpn', 14, 0], // 7 servers: ExitIP and EntryIP
      ['pia', 25, 0], // 10 + 15 server entries over the protocols; the signature after the JSON is passed over
      ['ivpn', 4, 0], // 2 WireGuard + 2 OpenVPN hosts
    ],
  );
  const s = openSnapshot(dataDir);
  t.teardown(() => s.close());
  const company = (ip: string) => (s.lookup(ip).is_vpn ? s.lookup(ip).company?.name : null);
  t.equal(company('31.171.153.66'), 'Mullvad VPN', 'wireguard.relays[].ipv4_addr_in');
  t.equal(company('2a04:27c0:0:3::f001'), 'Mullvad VPN', 'wireguard.relays[].ipv6_addr_in');
  t.equal(company('146.70.188.66'), 'Mullvad VPN', 'openvpn.relays[].ipv4_addr_in');
  t.equal(company('31.171.153.67'), null, 'the next address is not a relay');
  t.equal(company('194.99.105.99'), 'NordVPN', 'station');
  t.equal(company('45.14.71.15'), 'Proton VPN', 'ExitIP');
  t.equal(company('185.159.156.56'), 'Proton VPN', 'EntryIP');
  t.equal(company('62.133.47.16'), 'Private Internet Access', 'regions[].servers.ikev2[].ip');
  t.equal(company('140.228.21.164'), 'Private Internet Access', 'regions[].servers.wg[].ip');
  t.equal(company('185.244.212.69'), 'IVPN', 'wireguard[].hosts[].host');
  t.equal(company('185.244.212.66'), 'IVPN', 'openvpn[].hosts[].host');
  t.equal(company('146.70.146.226'), null, 'the v2ray address of a host is not its server address');
  t.same(s.lookup('194.99.105.99').company, { name: 'NordVPN', type: 'vpn', domain: 'nordvpn.com' });
});

t.test('AirVPN status and the Windscribe server list, on documents in their upstream shape', async (t) => {
  // No real response of these two APIs is in ../shared/data; their servers' addresses are (airvpn.txt, windscribe.txt).
  const airvpn = fixtureFile(
    t,
    'status.json',
    JSON.stringify({
      servers: [
        { public_name: 'Achernar', country_code: 'us', ip_v4_in1: '23.130.104.129', ip_v4_in2: '23.130.104.131', ip_v6_in1: '2001:ac8:20:5:6000:4b07:7b1c:4c0', health: 'ok' },
        { public_name: 'Adhara', country_code: 'us', ip_v4_in1: '', ip_v4_in3: '23.130.104.130', health: 'ok' },
      ],
      result: 'ok',
    }),
  );
  const windscribe = fixtureFile(
    t,
    'serverlist.json',
    JSON.stringify({
      data: [
        {
          id: 1,
          name: 'South Korea',
          country_code: 'KR',
          groups: [{ id: 2, city: 'Seoul', nick: 'Hanok', nodes: [{ ip: '1.220.90.178', ip2: '1.220.90.179', ip3: '1.220.90.180', hostname: 'kr-001.whiskergalaxy.com' }] }],
        },
        { id: 3, name: 'Japan', country_code: 'JP', groups: [{ id: 4, city: 'Tokyo', pro: 1 }] },
      ],
      info: { revision: 1 },
    }),
  );
  const { dataDir, summary } = await buildFrom(t, [
    { name: 'airvpn', kind: 'vpn', format: 'airvpn-status', path: airvpn },
    { name: 'windscribe', kind: 'vpn', format: 'windscribe-serverlist', path: windscribe },
  ]);
  t.same(summary.sources.map((s) => [s.name, s.records]), [['airvpn', 4], ['windscribe', 3]]);
  const s = openSnapshot(dataDir);
  t.teardown(() => s.close());
  t.equal(s.lookup('23.130.104.130').company?.name, 'AirVPN', 'ip_v4_in3');
  t.equal(s.lookup('2001:ac8:20:5:6000:4b07:7b1c:4c0').company?.name, 'AirVPN', 'ip_v6_in1');
  t.equal(s.lookup('1.220.90.180').company?.name, 'Windscribe', 'nodes[].ip3');
  t.equal(s.lookup('1.220.90.181').is_vpn, false);
});

t.test('a server entry without any address is a bad line, counted against the 1% rule', async (t) => {
  const servers = JSON.parse(readFileSync(path.join(samples, 'nordvpn.json'), 'utf8')) as Record<string, unknown>[];
  const broken = fixtureFile(t, 'servers.json', JSON.stringify([...servers, { ...servers[0], station: '', ipv6_station: '' }]));
  await t.rejects(buildFrom(t, [{ name: 'nordvpn', kind: 'vpn', format: 'nordvpn-servers', path: broken }]), {
    code: 'source_bad_lines',
    message: /source nordvpn: 1 of 2 lines of .*servers\.json are bad \(50\.0%.*\n.*servers\.json:2: entry without station or ipv6_station/,
  });
  const notJson = fixtureFile(t, 'relays.json', '{"wireguard": {}}');
  await t.rejects(buildFrom(t, [{ name: 'mullvad', kind: 'vpn', format: 'mullvad-relays', path: notJson }], 'other'), {
    code: 'source_unreadable',
    message: /source mullvad: .*relays\.json has no relays/,
  });
});

t.test('the provider is the company of its servers on the full snapshot, in place of the hosting company', async (t) => {
  const snapshot = openSnapshot(fullDataDir);
  t.teardown(() => snapshot.close());
  const servers: [string, string, string, string][] = [
    // address (a line of vpn-providers/<service>.txt), provider, domain, the ASN's organisation
    ['2.56.190.2', 'NordVPN', 'nordvpn.com', 'Clouvider Limited'],
    ['2.58.241.66', 'Proton VPN', 'protonvpn.com', 'HostingInside LTD'],
    ['2001:ac8:a:f::f001', 'Mullvad VPN', 'mullvad.net', 'M247 Europe SRL'],
    ['37.19.195.87', 'Surfshark', 'surfshark.com', 'Datacamp Limited'],
    ['23.130.104.129', 'AirVPN', 'airvpn.org', 'Quintex Alliance Consulting'],
    ['51.15.9.205', 'RiseupVPN', 'riseup.net', 'Scaleway SAS'],
    ['149.22.83.100', 'IVPN', 'ivpn.net', 'Datacamp Limited'],
  ];
  for (const [ip, name, domain, organisation] of servers) {
    const r = snapshot.lookup(ip);
    t.same([r.is_vpn, r.company], [true, { name, type: 'vpn', domain }], ip);
    t.equal(r.asn?.name, organisation, `${ip}: the ASN still names the hosting company`);
  }
  // The neighbour of a NordVPN server in the same hosting network: the hosting company.
  t.same(snapshot.lookup('2.56.190.1').company, { name: 'Clouvider Limited', type: 'hosting', domain: null });
});
