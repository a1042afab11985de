// POST /v1/check and /v1/check/batch answering on the full real-data
// snapshot, GET /v1/health and /v1/openapi.json, unknown paths and methods.
import t from 'tap';
import { openSnapshot } from '../src/index.js';
import { openapiDocument } from '../src/server/openapi.js';
import { loadPlans } from '../src/plans.js';
import { fullDataDir } from './helpers.js';
import { accountStore, accountWithKey, check, exchange, request, startServer } from './server.js';

const FIELDS = ['ip', 'is_vpn', 'is_proxy', 'is_tor', 'is_relay', 'is_hosting', 'risk_score', 'recommendation', 'company', 'location', 'asn'];

t.test('check answers: 200, the fields in the order of docs/API.md, rate-limit headers', async (t) => {
  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  const key = await accountWithKey(store, 'starter@example.com', 'starter');
  const snapshot = openSnapshot(fullDataDir);
  t.teardown(() => snapshot.close());

  const r = await check(server.port, key, { ip: '8.8.8.8' });
  t.equal(r.status, 200);
  t.equal(r.headers['content-type'], 'application/json; charset=utf-8');
  t.same(Object.keys(r.json), FIELDS);
  t.same(r.json, snapshot.lookup('8.8.8.8'), 'what the engine answers');
  t.equal(r.headers['x-ratelimit-limit'], '10000');
  t.equal(r.headers['x-ratelimit-remaining'], '9999');
  const midnight = Math.ceil((Date.now() + 1) / 86_400_000) * 86_400;
  t.equal(Number(r.headers['x-ratelimit-reset']), midnight, 'the next UTC midnight');

  for (const [ip, expected] of [
    ['204.8.96.141', { is_tor: true, risk_score: 100, recommendation: 'block' }], // also reported as a proxy, in a hosting ASN
    ['2001:4860:4860:0:0:0:0:8888', { ip: '2001:4860:4860::8888' }],
    ['::FFFF:8.8.8.8', { ip: '::ffff:8.8.8.8', is_hosting: true }],
    ['192.168.1.1', { is_hosting: false, risk_score: 0, recommendation: 'allow', company: null, location: null, asn: null }],
  ] as const) {
    await new Promise((resolve) => setTimeout(resolve, 110)); // starter: 10 per second
    const reply = await check(server.port, key, { ip });
    t.equal(reply.status, 200, ip);
    t.match(reply.json, expected, ip);
    t.same(reply.json, snapshot.lookup(ip), `${ip}: what the engine answers`);
  }
  // Charset parameters are allowed; extra body fields are ignored.
  await new Promise((resolve) => setTimeout(resolve, 110));
  const withCharset = await check(server.port, key, { ip: '1.1.1.1', note: 'x' }, { headers: { 'content-type': 'Application/JSON; charset=UTF-8' } });
  t.equal(withCharset.status, 200);
});

t.test('batch: one result per address in order, errors in place, each address counted', async (t) => {
  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  const key = await accountWithKey(store, 'pro@example.com', 'pro');
  const snapshot = openSnapshot(fullDataDir);
  t.teardown(() => snapshot.close());
  const ips = ['8.8.8.8', 'not-an-ip', '2620:7:6003::141', 12, '10.0.0.1'];
  const r = await request(server.port, '/v1/check/batch', {
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ ips }),
  });
  t.equal(r.status, 200);
  t.same(r.json, {
    results: [
      snapshot.lookup('8.8.8.8'),
      { error: 'invalid_ip', message: 'The IP address format is invalid', details: { ip: 'not-an-ip' } },
      snapshot.lookup('2620:7:6003::141'),
      { error: 'invalid_ip', message: 'The IP address format is invalid', details: { ip: '12' } },
      snapshot.lookup('10.0.0.1'),
    ],
  });
  t.equal(r.headers['x-ratelimit-remaining'], String(100_000 - 5), 'five addresses, five requests');
  const batch = (body: unknown) =>
    request(server.port, '/v1/check/batch', { headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  await new Promise((resolve) => setTimeout(resolve, 1100)); // pro: 50 per second
  for (const body of [{}, { ips: [] }, { ips: 'x' }, { ips: new Array(1001).fill('1.1.1.1') }]) {
    const bad = await batch(body);
    t.equal(bad.status, 400);
    t.equal(bad.json.error, 'invalid_batch');
  }
  t.equal((await batch([1, 2])).json.error, 'invalid_json');
  // A batch over the per-second limit is refused whole.
  await new Promise((resolve) => setTimeout(resolve, 1100));
  const tooMany = await batch({ ips: new Array(60).fill('1.1.1.1') });
  t.equal(tooMany.status, 429);
  t.equal(tooMany.json.message, 'Per-second request limit exceeded');
});

t.test('health, the OpenAPI document, unknown paths and methods', async (t) => {
  const server = await startServer(t);
  const health = await request(server.port, '/v1/health', { method: 'GET' });
  t.equal(health.status, 200);
  t.same(health.json, { status: 'healthy' });
  t.equal(health.headers['x-ratelimit-limit'], undefined, 'health carries no rate-limit headers');

  const openapi = await request(server.port, '/v1/openapi.json', { method: 'GET' });
  t.equal(openapi.status, 200);
  t.same(openapi.json, openapiDocument(loadPlans()));

  const unknown = await request(server.port, '/v2/check', { method: 'POST', body: '{}' });
  t.equal(unknown.status, 404);
  t.same(unknown.json, { error: 'not_found', message: 'No such endpoint', details: {} });
  for (const [method, path, allowed] of [
    ['GET', '/v1/check', 'POST'],
    ['PUT', '/v1/check', 'POST'],
    ['DELETE', '/v1/check/batch', 'POST'],
    ['POST', '/v1/health', 'GET, HEAD'],
    ['POST', '/v1/openapi.json', 'GET, HEAD'],
  ] as const) {
    const r = await request(server.port, path, { method });
    t.equal(r.status, 405, `${method} ${path}`);
    t.equal(r.headers.allow, allowed);
    t.same(r.json, { error: 'method_not_allowed', message: 'Method not allowed on this endpoint', details: { allowed: allowed.split(', ') } });
  }
});

t.test('HEAD: the status and headers GET (or the method) would get, no content; the connection stays in step', async (t) => {
  const server = await startServer(t);
  const asGet = await request(server.port, '/v1/openapi.json', { method: 'GET' });
  // One keep-alive connection: content sent after a HEAD answer would be read as the next answer.
  const wire = [
    'HEAD /v1/health',
    'HEAD /v1/openapi.json',
    'HEAD /v1/check',
    'HEAD /v2/nothing',
    'HEAD /dashboard/sign-in',
    'HEAD /dashboard/nothing',
    'HEAD /dashboard/api/keys',
    'GET /v1/health',
  ];
  const { answers, malformed } = await exchange(server.port, wire.map((line) => `${line} HTTP/1.1\r\nHost: x\r\n\r\n`).join(''), wire.length, {
    head: wire.map((line) => line.startsWith('HEAD')),
  });
  t.equal(malformed, null);
  t.same(
    answers.map((a) => [a.status, a.body]),
    [[200, ''], [200, ''], [405, ''], [404, ''], [200, ''], [404, ''], [401, ''], [200, '{"status":"healthy"}']],
  );
  t.equal(answers[1]!.headers['content-length'], String(Buffer.byteLength(asGet.text)), 'the length GET would send');
  t.equal(answers[2]!.headers.allow, 'POST');
  t.equal(answers[4]!.headers['content-type'], 'text/html; charset=utf-8');
});
