// Every bad request of docs/API.md gets its exact status and error body:
// keys (missing, malformed, unknown, revoked, suspended, wrong source),
// content type, body size and shape, the ip field, every invalid address
// form; and the order of the checks.
import path from 'node:path';
import { open } from 'lmdb';
import t from 'tap';
import { accountStore, accountWithKey, check, exchange, request, startServer } from './server.js';

const errorOf = (error: string, message: string, details: object = {}) => ({ error, message, details });
const UNAUTHORIZED = errorOf('unauthorized', 'Missing or invalid API key');
const FORBIDDEN = errorOf('forbidden', 'API key does not have access');

t.test('keys: missing, malformed, unknown and revoked answer 401; suspended and wrong source 403', async (t) => {
  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  const key = await accountWithKey(store, 'a@example.com', 'pro');
  const body = JSON.stringify({ ip: '8.8.8.8' });
  const post = (headers: Record<string, string>) => request(server.port, '/v1/check', { headers: { 'content-type': 'application/json', ...headers }, body });

  for (const headers of [
    {},
    { authorization: '' },
    { authorization: key },
    { authorization: `Basic ${key}` },
    { authorization: 'Bearer' },
    { authorization: `Bearer  ${key} x` },
    { authorization: `Bearer ${key}!` },
    { authorization: `Bearer ${key.slice(0, -1)}` },
    { authorization: 'Bearer ipr_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA' },
  ]) {
    const r = await post(headers);
    t.equal(r.status, 401, JSON.stringify(headers).slice(0, 40));
    t.same(r.json, UNAUTHORIZED);
    t.equal(r.headers['x-ratelimit-limit'], '20', 'the per-address window');
  }
  t.equal((await post({ authorization: `bearer ${key}` })).status, 200, 'the scheme is case-insensitive');

  // Revoked: at once, while the server runs, from another process's change.
  const other = store.createKey('a@example.com', 'second').key;
  t.equal((await check(server.port, other, { ip: '8.8.8.8' })).status, 200);
  store.revokeKey('a@example.com', other.slice(0, 8));
  const revoked = await check(server.port, other, { ip: '8.8.8.8' });
  t.equal(revoked.status, 401);
  t.same(revoked.json, UNAUTHORIZED);
  t.equal((await check(server.port, key, { ip: '8.8.8.8' })).status, 200, "the account's other key still works");

  // Suspended account: 403 for every key of it; reactivated: 200 again.
  store.setStatus('a@example.com', 'suspended');
  const suspended = await check(server.port, key, { ip: '8.8.8.8' });
  t.equal(suspended.status, 403);
  t.same(suspended.json, FORBIDDEN);
  store.setStatus('a@example.com', 'active');
  t.equal((await check(server.port, key, { ip: '8.8.8.8' })).status, 200);

  // Allowed source addresses: the test connects from 127.0.0.1.
  const elsewhere = store.createKey('a@example.com', 'office only', ['203.0.113.0/24', '2001:db8::/32']).key;
  const refused = await check(server.port, elsewhere, { ip: '8.8.8.8' });
  t.equal(refused.status, 403);
  t.same(refused.json, FORBIDDEN);
  const here = store.createKey('a@example.com', 'loopback', ['10.0.0.0/8', '127.0.0.1']).key;
  t.equal((await check(server.port, here, { ip: '8.8.8.8' })).status, 200);
  store.setAllowed('a@example.com', elsewhere.slice(0, 8), ['127.0.0.0/8']);
  t.equal((await check(server.port, elsewhere, { ip: '8.8.8.8' })).status, 200, 'a changed list applies at once');
});

t.test('content type, body size and body shape', async (t) => {
  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  const key = await accountWithKey(store, 'b@example.com', 'enterprise');
  const auth = { authorization: `Bearer ${key}` };
  const post = (headers: Record<string, string>, body: string | Buffer, chunked?: number) =>
    request(server.port, '/v1/check', { headers: { ...auth, ...headers }, body, ...(chunked ? { chunked } : {}) });
  const json = { 'content-type': 'application/json' };

  for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'application/jsonp', '']) {
    const r = await post(type ? { 'content-type': type } : {}, '{"ip":"8.8.8.8"}');
    t.equal(r.status, 415, `content-type ${JSON.stringify(type)}`);
    t.same(r.json, errorOf('unsupported_media_type', 'Content-Type must be application/json'));
  }
  const big = JSON.stringify({ ip: '8.8.8.8', pad: 'x'.repeat(9000) });
  for (const [label, chunked] of [['declared', undefined], ['chunked', 1000]] as const) {
    const r = await post(json, big, chunked);
    t.equal(r.status, 413, label);
    t.same(r.json, errorOf('payload_too_large', 'The request body is too large', { max_bytes: 8192 }));
  }
  const justFits = JSON.stringify({ ip: '8.8.8.8', pad: 'x'.repeat(8192 - 25) });
  t.equal(Buffer.byteLength(justFits), 8192);
  t.equal((await post(json, justFits)).status, 200, 'exactly 8 KiB is allowed');
  t.equal((await post(json, '{"ip":"8.8.8.8"}', 3)).status, 200, 'a chunked body is read whole');

  const INVALID_JSON = errorOf('invalid_json', 'The request body is not a JSON object');
  for (const body of ['', 'nope', '{"ip":', '[{"ip":"8.8.8.8"}]', '"8.8.8.8"', '42', 'null', 'true']) {
    const r = await post(json, body);
    t.equal(r.status, 400, `body ${JSON.stringify(body)}`);
    t.same(r.json, INVALID_JSON);
  }
  t.equal((await post(json, '\uFEFF{"ip":"8.8.8.8"}')).status, 200, 'a UTF-8 byte order mark is ignored (RFC 8259 allows it)');
  const badUtf8 = await post(json, Buffer.from([0x7b, 0x22, 0x69, 0x70, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d]));
  t.equal(badUtf8.status, 400);
  t.same(badUtf8.json, errorOf('invalid_json', 'The request body is not a JSON object', { reason: 'the body is not UTF-8' }));

  const MISSING = errorOf('missing_ip', 'The request body has no ip field');
  for (const body of [{}, { ip: null }, { IP: '8.8.8.8' }, { address: '8.8.8.8' }]) {
    const r = await post(json, JSON.stringify(body));
    t.equal(r.status, 400, JSON.stringify(body));
    t.same(r.json, MISSING);
  }
});

t.test('413: answered at once, the rest of the body passed over, the connection goes on', async (t) => {
  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  const key = await accountWithKey(store, 'big@example.com', 'enterprise');
  const big = JSON.stringify({ ip: '8.8.8.8', pad: 'x'.repeat(70_000) });
  const head = (path: string, extra: string) => `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\n${extra}\r\n`;
  const chunked = `${(big.length).toString(16)}\r\n${big}\r\n0\r\n\r\n`;
  const next = 'GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n';
  // Each pipelined with its whole body and a request after it. Closing after
  // the 413 with body bytes unread made the kernel reset the connection, and
  // clients lost the 413 itself (76 times in 2,000 such pipelines).
  for (const [label, bytes, max] of [
    ['check, declared', `${head('/v1/check', `Content-Length: ${big.length}\r\n`)}${big}`, 8192],
    ['check, chunked', `${head('/v1/check', 'Transfer-Encoding: chunked\r\n')}${chunked}`, 8192],
    ['batch, declared', `${head('/v1/check/batch', `Content-Length: ${big.length}\r\n`)}${big}`, 65536],
    ['dashboard, declared', `POST /dashboard/api/session HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${big.length}\r\n\r\n${big}`, 8192],
  ] as const) {
    const { answers, malformed, closed } = await exchange(server.port, bytes + next, 2, { waitMs: 500 });
    t.equal(malformed, null);
    t.same([answers[0]?.headers.connection, closed], [undefined, false], `${label}: the connection is not closed`);
    t.same(
      answers.map((a) => [a.status, a.body]),
      [
        [413, JSON.stringify({ error: 'payload_too_large', message: 'The request body is too large', details: { max_bytes: max } })],
        [200, '{"status":"healthy"}'],
      ],
      label,
    );
  }
});

t.test('every invalid address form answers 400 invalid_ip with the input as text', async (t) => {
  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  const key = await accountWithKey(store, 'c@example.com', 'enterprise');
  const cases: [unknown, string][] = [
    [8, '8'],
    [134744072, '134744072'],
    [true, 'true'],
    [['8.8.8.8'], '["8.8.8.8"]'],
    [{ v4: '8.8.8.8' }, '{"v4":"8.8.8.8"}'],
    ['', ''],
    [' 8.8.8.8', ' 8.8.8.8'],
    ['8.8.8.8 ', '8.8.8.8 '],
    ['8.8.8', '8.8.8'],
    ['010.1.1.1', '010.1.1.1'],
    ['0x8.8.8.8', '0x8.8.8.8'],
    ['256.1.1.1', '256.1.1.1'],
    ['8.8.8.8/32', '8.8.8.8/32'],
    ['fe80::1%eth0', 'fe80::1%eth0'],
    ['[::1]', '[::1]'],
    ['1::2::3', '1::2::3'],
    ['2001:db8::/32', '2001:db8::/32'],
    ['example.com', 'example.com'],
    ['x'.repeat(100), 'x'.repeat(64)],
  ];
  for (const [ip, shown] of cases) {
    const r = await check(server.port, key, { ip });
    t.equal(r.status, 400, JSON.stringify(ip).slice(0, 40));
    t.same(r.json, errorOf('invalid_ip', 'The IP address format is invalid', { ip: shown }));
  }
});

t.test('deeply nested input: invalid_ip with its first 64 characters, never a 500', async (t) => {
  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  const key = await accountWithKey(store, 'nested@example.com', 'enterprise');
  const post = (path: string, body: string) => request(server.port, path, { headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body });
  const INVALID = (shown: string) => errorOf('invalid_ip', 'The IP address format is invalid', { ip: shown });
  // As deep as 8 KiB allows in a check, 25,000 levels in a batch (of 64 KiB at most): JSON.stringify overflows the stack on those.
  const check = await post('/v1/check', `{"ip":${'['.repeat(4090)}${']'.repeat(4090)}}`);
  t.same([check.status, check.json], [400, INVALID('['.repeat(64))]);
  const batch = await post('/v1/check/batch', `{"ips":["8.8.8.8",${'['.repeat(25_000)}${']'.repeat(25_000)},${'{"a":'.repeat(2000)}1${'}'.repeat(2000)}]}`);
  t.equal(batch.status, 200);
  t.same(batch.json.results.slice(1), [INVALID('['.repeat(64)), INVALID('{"a":'.repeat(13).slice(0, 64))]);
  t.equal(batch.json.results[0].ip, '8.8.8.8');
  t.notMatch(server.output(), /request failed/);
});

t.test('order: authentication, then limits, then the body; what counts', async (t) => {
  const server = await startServer(t);
  const store = accountStore(t, server.dataDir);
  const key = await accountWithKey(store, 'd@example.com', 'free'); // 100 a day, 1 a second
  // A bad key with a bad body: 401, not 400.
  const r1 = await request(server.port, '/v1/check', { headers: { authorization: 'Bearer nope-nope-nope-nope' }, body: 'x' });
  t.equal(r1.status, 401);
  // A good key with a bad body: the body's error, counted against the quota.
  const r2 = await request(server.port, '/v1/check', { headers: { authorization: `Bearer ${key}`, 'content-type': 'text/plain' }, body: 'x' });
  t.equal(r2.status, 415);
  t.equal(r2.headers['x-ratelimit-remaining'], '99', 'a validation failure counts');
  // Over the per-second limit with a bad body: 429, not 415; not counted.
  const r3 = await request(server.port, '/v1/check', { headers: { authorization: `Bearer ${key}`, 'content-type': 'text/plain' }, body: 'x' });
  t.equal(r3.status, 429);
  t.equal(r3.headers['x-ratelimit-remaining'], '99', 'a 429 does not count');
  await new Promise((resolve) => setTimeout(resolve, 1100));
  const r4 = await check(server.port, key, { ip: '8.8.8.8' });
  t.equal(r4.status, 200);
  t.equal(r4.headers['x-ratelimit-remaining'], '98', '401s did not count either');
});

t.test('the server refuses to start on the uWebSockets.js fallback', async (t) => {
  await t.rejects(startServer(t, { env: { UWS_USE_FALLBACK: '1' } }), /refusing to start on the JavaScript fallback/);
});

t.test('a handler that throws answers 500 internal_error and the worker keeps serving; keys stay out of logs', async (t) => {
  // A key record damaged in the store (its allowed addresses not a list): reading it throws.
  // (Before issue 13 a key past the limit table made the handler throw; keys are now refused before that.)
  const server = await startServer(t, { workers: 1 });
  const store = accountStore(t, server.dataDir);
  const first = await accountWithKey(store, 'e@example.com', 'enterprise');
  const { key: second, record } = store.createKey('e@example.com', 'damaged', ['192.0.2.0/24']);
  const raw = open({ path: path.join(server.dataDir, 'accounts'), maxDbs: 16 });
  t.teardown(() => raw.close());
  await raw.openDB({ name: 'keys' }).put(record.hash, { ...record, allowed: 7 });
  const failed = await check(server.port, second, { ip: '8.8.8.8' });
  t.equal(failed.status, 500);
  t.same(failed.json, { error: 'internal_error', message: 'Server error', details: {} });
  t.notMatch(failed.text, /at |Error:|\.ts|\.js/, 'no stack trace');
  for (let i = 0; i < 3; i++) t.equal((await check(server.port, first, { ip: '8.8.8.8' })).status, 200, 'still serving');
  await new Promise((resolve) => setTimeout(resolve, 100));
  t.match(server.output(), /"msg":"request failed"/, 'the failure is logged');
  t.notOk(server.output().includes(first) || server.output().includes(second), 'no key in the logs');
  t.notOk(server.output().includes(second.slice(12)), 'not even part of one');
});
