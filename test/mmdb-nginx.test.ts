// nginx's GeoIP2 module (Debian libnginx-mod-http-geoip2, on libmaxminddb)
// loads an export and maps a request header to is_vpn and the risk fields,
// as an operator would put it in front of an application: a snapshot of the
// real VPN and Tor feeds, exported by `ipr export`, nginx on loopback.
import { spawnSync } from 'node:child_process';
import http from 'node:http';
import path from 'node:path';
import t from 'tap';
import { openSnapshot } from '../src/index.js';
import { buildFrom, cli, feeds, testDir } from './helpers.js';
import { freePort, GEOIP2_MODULE, startNginx } from './nginx.js';

function get(port: number, clientIp: string): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port, path: '/', headers: { 'x-client-ip': clientIp } }, (res) => {
        let body = '';
        res.on('data', (d) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
      })
      .on('error', reject);
  });
}

t.test('nginx maps X-Client-IP to is_vpn, risk_score and recommendation from the export', async (t) => {
  const { dataDir } = await buildFrom(t, [
    { name: 'vpn-ipv4', kind: 'vpn', format: 'cidr-list', path: path.join(feeds, 'vpn/ipv4.txt') },
    { name: 'vpn-ipv6', kind: 'vpn', format: 'cidr-list', path: path.join(feeds, 'vpn/ipv6.txt') },
    { name: 'tor-exits', kind: 'tor', format: 'tor-csv', path: path.join(feeds, 'tor/exits.csv') },
  ]);
  const mmdb = path.join(testDir(t), 'ipr.mmdb');
  const exported = spawnSync(process.execPath, [cli, 'export', '--format', 'mmdb', '--data', dataDir, '--out', mmdb], { encoding: 'utf8' });
  t.equal(exported.status, 0, exported.stderr);

  const port = await freePort();
  // A VPN address is refused with 403, as a site would; every answer says what nginx read.
  const nginx = await startNginx(
    t,
    `  geoip2 ${mmdb} {
    $ipr_is_vpn default=0 source=$http_x_client_ip is_vpn;
    $ipr_is_tor default=0 source=$http_x_client_ip is_tor;
    $ipr_risk_score default=0 source=$http_x_client_ip risk_score;
    $ipr_recommendation default=unknown source=$http_x_client_ip recommendation;
  }
  server {
    listen 127.0.0.1:${port};
    add_header X-IPR-Is-VPN $ipr_is_vpn always;
    location / {
      if ($ipr_is_vpn = 1) { return 403 "VPN\\n"; }
      return 200 "is_tor=$ipr_is_tor risk_score=$ipr_risk_score recommendation=$ipr_recommendation\\n";
    }
  }`,
    [port],
    { modules: [GEOIP2_MODULE] },
  );

  const snapshot = openSnapshot(dataDir);
  t.teardown(() => snapshot.close());
  // Listed in the VPN feeds (IPv4, IPv6, IPv4-mapped, 6to4 of a listed IPv4), a Tor exit, neither.
  const addresses = ['2.26.157.1', '2001:550:1d05::1', '::ffff:2.26.157.1', '2002:21a:9d01::1', '204.8.96.141', '2620:7:6003::141', '8.8.8.8', '10.0.0.1'];
  const vpn = [true, true, true, true, false, false, false, false];
  for (const [i, ip] of addresses.entries()) {
    const expected = snapshot.lookup(ip === '2002:21a:9d01::1' ? '2.26.157.1' : ip);
    t.equal(expected.is_vpn, vpn[i], `${ip}: is_vpn ${vpn[i]} in ipr`);
    const r = await get(port, ip);
    t.equal(r.headers['x-ipr-is-vpn'], expected.is_vpn ? '1' : '0', `${ip}: X-IPR-Is-VPN`);
    if (expected.is_vpn) {
      t.equal(r.status, 403, `${ip}: refused`);
    } else {
      t.equal(r.status, 200, `${ip}: served`);
      t.equal(r.body, `is_tor=${expected.is_tor ? 1 : 0} risk_score=${expected.risk_score} recommendation=${expected.recommendation}\n`, ip);
    }
  }
  t.equal((await get(port, 'not-an-address')).headers['x-ipr-is-vpn'], '0', 'a header that is no address: the default');
  t.notMatch(nginx.output(), /\[(error|crit|alert|emerg)\]/, 'nginx logged no error');
});
