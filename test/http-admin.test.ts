// The admin port: Prometheus metrics that count exactly the requests made,
// the serving snapshot's provenance, the access log (a key's prefix, never
// the key), and its binding rules (loopback by default; elsewhere only with
// a token, which every request must then carry).
import { readFileSync } from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { fullDataDir, runIpr, testDir } from './helpers.js';
import { accountStore, accountWithKey, admin, adminAddress, check, dataDirWithFullSnapshot, request, samples, startServer, type Server } from './server.js';


t.test('metrics count every request by route and status, with latencies and limit refusals; provenance; the access log', async (t) => {
  const accessLog = path.join(testDir(t), 'access.log');
  // A frozen test clock: the free key's second request falls in the same second, so the per-second limit refuses it.
  const server = await startServer(t, { workers: 2, clock: '2026-06-01T12:00:00.000Z', args: ['--admin-port', '0', '--access-log', accessLog] });
  const { host, port } = adminAddress(server);
  t.equal(host, '127.0.0.1', 'the admin port binds loopback by default');
  const store = accountStore(t, server.dataDir);
  const enterprise = await accountWithKey(store, 'ent@example.com', 'enterprise');
  const free = await accountWithKey(store, 'free@example.com', 'free');

  for (const ip of ['8.8.8.8', '204.8.96.141', '2001:db8::1']) t.equal((await check(server.port, enterprise, { ip })).status, 200);
  t.equal((await check(server.port, null, { ip: '8.8.8.8' })).status, 401);
  t.equal((await check(server.port, free, { ip: '8.8.8.8' })).status, 200);
  t.equal((await check(server.port, free, { ip: '8.8.8.8' })).status, 429);
  const batch = await request(server.port, '/v1/check/batch', {
    headers: { authorization: `Bearer ${enterprise}`, 'content-type': 'application/json' },
    body: JSON.stringify({ ips: ['8.8.8.8', '1.1.1.1'] }),
  });
  t.equal(batch.status, 200);
  t.equal((await request(server.port, '/nope', { method: 'GET' })).status, 404);
  for (let i = 0; i < 2; i++) t.equal((await request(server.port, '/v1/health', { method: 'GET' })).status, 200);

  const scrape = await admin(port, '/metrics');
  t.equal(scrape.status, 200);
  t.equal(scrape.headers['content-type'], 'text/plain; version=0.0.4; charset=utf-8');
  const m = samples(scrape.text);
  t.same(
    [...m].filter(([k]) => k.startsWith('ipr_http_requests_total')),
    [
      ['ipr_http_requests_total{route="/v1/check",status="200"}', 4],
      ['ipr_http_requests_total{route="/v1/check",status="401"}', 1],
      ['ipr_http_requests_total{route="/v1/check",status="429"}', 1],
      ['ipr_http_requests_total{route="/v1/check/batch",status="200"}', 1],
      ['ipr_http_requests_total{route="/v1/health",status="200"}', 2],
      ['ipr_http_requests_total{route="other",status="404"}', 1],
    ],
    'requests by route and status',
  );
  t.equal(m.get('ipr_rate_limit_rejections_total{limit="second"}'), 1);
  t.equal(m.get('ipr_rate_limit_rejections_total{limit="day"}'), 0);
  t.equal(m.get('ipr_rate_limit_rejections_total{limit="address"}'), 0);
  const buckets = [...m].filter(([k]) => k.startsWith('ipr_http_request_duration_seconds_bucket{route="/v1/check",'));
  t.equal(buckets.length, 14, '13 bounds and +Inf');
  t.same(buckets.at(-1), ['ipr_http_request_duration_seconds_bucket{route="/v1/check",le="+Inf"}', 6]);
  t.ok(buckets.every(([, v], i) => i === 0 || v >= buckets[i - 1]![1]), 'cumulative buckets');
  t.equal(m.get('ipr_http_request_duration_seconds_count{route="/v1/check"}'), 6);
  t.ok(m.get('ipr_http_request_duration_seconds_sum{route="/v1/check"}')! > 0);

  const info = JSON.parse((await runIpr('info', '--data', fullDataDir)).stdout);
  t.equal(m.get('ipr_snapshot_prefixes{table="tor",family="ipv4"}'), info.meta.tables.tor.ipv4);
  t.equal(m.get('ipr_snapshot_prefixes{table="geo",family="ipv6"}'), info.meta.tables.geo.ipv6);
  t.equal(m.get('ipr_snapshot_records{kind="locations"}'), info.meta.records.locations);
  t.equal(m.get('ipr_source_records{source="geo-ipv4"}'), 6324784);
  t.equal(m.get('ipr_snapshot_build_timestamp_seconds'), Date.parse(info.built_at) / 1000);
  t.ok(m.get('ipr_snapshot_age_seconds')! >= 0);
  t.equal(m.get('ipr_snapshot_swaps_total'), 0);
  t.equal(m.get('ipr_updates_total{result="failed"}'), 0);
  t.ok(m.get('process_resident_memory_bytes')! > 0, 'process metrics too');

  const prov = await admin(port, '/provenance');
  t.equal(prov.status, 200);
  const p = JSON.parse(prov.text);
  t.equal(path.basename(p.snapshot.path), path.basename(info.path));
  t.match(p.snapshot, { built_at: info.built_at, checksum: info.checksum, age_seconds: Number, inputs: /^[0-9a-f]{64}$/ });
  t.equal(p.sources.length, 51);
  t.match(p.sources.find((s: { name: string }) => s.name === 'tor-exits'), { location: /exits\.csv$/, records: 5933, bad_lines: 0, modified_at: String });
  t.equal(p.updates, null, 'no scheduled updates');
  t.equal((await admin(port, '/nope')).status, 404);
  t.equal((await admin(port, '/metrics', { method: 'POST' })).status, 405);

  t.equal(await server.stop(), 0);
  const log = readFileSync(accessLog, 'utf8');
  const lines = log.trim().split('\n').map((l) => JSON.parse(l));
  t.equal(lines.length, 10, 'a line per request');
  for (const line of lines) t.match(line, { req: /^[01]-[0-9]+$/, route: String, status: Number, us: Number, client: '127.0.0.1' });
  t.same(
    lines.filter((l) => l.route === '/v1/check').map((l) => [l.status, l.key ?? null]).sort(),
    [
      [200, enterprise.slice(0, 8)],
      [200, enterprise.slice(0, 8)],
      [200, enterprise.slice(0, 8)],
      [200, free.slice(0, 8)],
      [401, null],
      [429, free.slice(0, 8)],
    ].sort(),
    'keys appear by prefix',
  );
  t.notOk(log.includes(enterprise) || log.includes(free), 'never a whole key');
});

t.test('the admin port on a non-loopback address needs a token, and then every request must carry it', async (t) => {
  await t.rejects(startServer(t, { workers: 1, args: ['--admin-port', '0', '--admin-host', '0.0.0.0'] }), {
    message: /ipr: the admin port on 0\.0\.0\.0 \(not loopback\) needs a token: set IPR_ADMIN_TOKEN or --admin-token-file/,
  });
  const token = 'a-long-enough-admin-token';
  const server = await startServer(t, { dataDir: dataDirWithFullSnapshot(t, 'tokened'), workers: 1, env: { IPR_ADMIN_TOKEN: token }, args: ['--admin-port', '0', '--admin-host', '0.0.0.0'] });
  const { host, port } = adminAddress(server);
  t.equal(host, '0.0.0.0');
  const none = await admin(port, '/metrics');
  t.equal(none.status, 401);
  t.equal(none.headers['www-authenticate'], 'Bearer');
  t.same(JSON.parse(none.text), { error: 'unauthorized', message: 'Missing or invalid API key', details: {} });
  t.equal((await admin(port, '/provenance', { token: `${token}x` })).status, 401);
  t.equal((await admin(port, '/metrics', { token })).status, 200);
  t.equal((await admin(port, '/provenance', { token })).status, 200);
});
