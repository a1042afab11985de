// The typed client (ip-reputation/client) against a real `ipr serve`:
// answers equal to the server's, batches of any length in order, errors as
// IprApiError, and the retries: 429 after Retry-After (a Free key: one
// request a second), 503 from the deployment kit's nginx while the server is
// down, network errors (a stopped server, a TCP server that resets), and
// timeouts (a server stopped with SIGSTOP, a TCP server that never answers).
// Attempts are counted where they land: the server's metrics, the
// connections a TCP server accepts.
import net from 'node:net';
import path from 'node:path';
import t, { type Test } from 'tap';
import { IprApiError, IprClient, MAX_RETRY_AFTER, type CheckResult, type ErrorBody } from 'ip-reputation/client';
import { openSnapshot } from '../src/index.js';
import { fullDataDir, root } from './helpers.js';
import { freePort, startNginx } from './nginx.js';
import { accountStore, accountWithKey, admin, adminAddress, plansFile, samples, setClock, startServer, type Server } from './server.js';

const snapshot = openSnapshot(fullDataDir);
t.teardown(() => snapshot.close());

/** Requests the server answered on a route, by status, from its admin port's metrics. */
async function answered(server: Server, route: string): Promise<Record<string, number>> {
  const m = samples((await admin(adminAddress(server).port, '/metrics')).text);
  const out: Record<string, number> = {};
  for (const [name, value] of m) {
    const match = new RegExp(`^ipr_http_requests_total\\{route="${route.replace(/\//g, '\\/')}",status="([0-9a-z]+)"\\}$`).exec(name);
    if (match && value > 0) out[match[1]!] = value;
  }
  return out;
}

/** What the server answered on a route from now on: call the result for the counts since. */
async function counter(server: Server, route: string): Promise<() => Promise<Record<string, number>>> {
  const before = await answered(server, route);
  return async () => {
    const now = await answered(server, route);
    return Object.fromEntries(Object.entries(now).filter(([status, n]) => n > (before[status] ?? 0)).map(([status, n]) => [status, n - (before[status] ?? 0)]));
  };
}

/** Rejects with the IprApiError `promise` throws (fails the test when it resolves). */
async function failure(promise: Promise<unknown>): Promise<IprApiError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof IprApiError) return error;
    throw error;
  }
  throw new Error('expected an IprApiError');
}

/** A local TCP server that does `onConnection` to each connection; counts them. */
async function tcpServer(t: Test, onConnection: (socket: net.Socket) => void): Promise<{ port: number; connections: () => number }> {
  let connections = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    connections++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    onConnection(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(
    () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  );
  return { port: (server.address() as net.AddressInfo).port, connections: () => connections };
}

// One server for the tests on the real clock, with plans beside the spec's:
// one that takes 1,000 addresses in a second (the spec's take at most 100),
// one that takes 300.
const server = await startServer(t, { args: ['--admin-port', '0'], env: { IPR_PLANS_CONFIG: plansFile(t, { bulk: [null, 10_000], small: [null, 300] }) } });
const store = accountStore(t, server.dataDir);

t.test('check and checkBatch answer what the server answers, in order, in batches of 1,000', async (t) => {
  const key = await accountWithKey(store, 'bulk@example.com', 'bulk');
  const batches = await counter(server, '/v1/check/batch');
  const client = new IprClient({ baseUrl: `http://127.0.0.1:${server.port}`, apiKey: key });

  t.same(await client.check('8.8.8.8'), snapshot.lookup('8.8.8.8'));
  t.same(await client.check('2001:DB8::1'), snapshot.lookup('2001:db8::1'), 'the canonical text comes back');

  // 2,500 entries: addresses of both families, invalid texts and values that are not text.
  const ips: unknown[] = [];
  for (let i = 0; i < 2500; i++) {
    const pick = i % 5;
    ips.push(pick === 0 ? `${(i * 7) % 224}.${i % 256}.${(i * 13) % 256}.${i % 200}` : pick === 1 ? `2a0${i % 10}:${i.toString(16)}::${i % 97}` : pick === 2 ? `not-an-ip-${i}` : pick === 3 ? i : '204.8.96.141');
  }
  const results = await client.checkBatch(ips);
  t.same(results, snapshot.lookupMany(ips), 'each entry answers what ipr answers for it, in the order given');
  t.equal(results.filter((r) => 'error' in r).length, 1000, 'invalid entries are their error objects');
  t.same(await batches(), { '200': 3 }, 'three requests of at most 1,000');

  // Long invalid entries: 1,000 of them would pass the server's 64 KiB body limit, so they go in more requests.
  const long = Array.from({ length: 1000 }, (_, i) => `${'x'.repeat(100)}${i}`);
  const longResults = (await client.checkBatch(long)) as ErrorBody[];
  t.same(longResults.map((r) => r.details.ip), long.map((s) => s.slice(0, 64)));
  t.same(await batches(), { '200': 5 }, 'split by body size into two more');
  t.same(await client.checkBatch([]), [], 'nothing to check: no request');
});

t.test("batches larger than the key's per-second limit are halved until they pass", async (t) => {
  const key = await accountWithKey(store, 'small@example.com', 'small');
  const counted = await counter(server, '/v1/check/batch');
  const ips = Array.from({ length: 1000 }, (_, i) => `198.${i % 256}.${(i * 7) % 256}.1`);
  const results = await new IprClient({ baseUrl: `http://127.0.0.1:${server.port}`, apiKey: key }).checkBatch(ips);
  t.same(results, snapshot.lookupMany(ips));
  const batches = await counted();
  t.ok(batches['200']! >= 4, `answered in batches of at most 250 (${batches['200']})`);
  t.ok(batches['429']! >= 4, `1,000 and 500 were refused twice each (${batches['429']} refusals in all)`);
});

t.test('errors are IprApiError with status, code, message and details; other 4xx are not retried', async (t) => {
  const key = await accountWithKey(store, 'pro@example.com', 'pro');
  const checks = await counter(server, '/v1/check');
  const base = `http://127.0.0.1:${server.port}`;

  const invalid = await failure(new IprClient({ baseUrl: base, apiKey: key, maxRetries: 3 }).check('999.1.1.1'));
  t.match(invalid, { name: 'IprApiError', status: 400, code: 'invalid_ip', message: 'The IP address format is invalid', details: { ip: '999.1.1.1' }, retryAfter: null });
  const unknown = await failure(new IprClient({ baseUrl: `${base}/v1/`, apiKey: 'ipr_not-a-key', maxRetries: 3 }).check('8.8.8.8'));
  t.match(unknown, { status: 401, code: 'unauthorized', message: 'Missing or invalid API key', details: {} });
  store.setStatus('pro@example.com', 'suspended');
  const suspended = await failure(new IprClient({ baseUrl: base, apiKey: key, maxRetries: 3 }).check('8.8.8.8'));
  t.match(suspended, { status: 403, code: 'forbidden' });
  t.same(await checks(), { '400': 1, '401': 1, '403': 1 }, 'one attempt each');

  t.throws(() => new IprClient({ baseUrl: 'ftp://x', apiKey: key }), TypeError);
  t.throws(() => new IprClient({ baseUrl: base, apiKey: '' }), TypeError);
  t.throws(() => new IprClient({ baseUrl: base, apiKey: key, maxRetries: -1 }), TypeError);
  await t.rejects(new IprClient({ baseUrl: base, apiKey: key }).checkBatch('8.8.8.8' as never), TypeError);
});

t.test('429: retried after Retry-After; thrown when out of retries, or when the wait is a spent daily limit', async (t) => {
  // On the test clock: the second check falls in the first one's second, and the clock moves on while the client waits.
  const plans = plansFile(t, { tiny: [2, 10] });
  const server = await startServer(t, { args: ['--admin-port', '0'], env: { IPR_PLANS_CONFIG: plans }, clock: '2026-06-01T12:00:00.000Z' });
  const store = accountStore(t, server.dataDir);
  const free = await accountWithKey(store, 'free@example.com', 'free');
  const client = new IprClient({ baseUrl: `http://127.0.0.1:${server.port}`, apiKey: free });

  await client.check('8.8.8.8');
  const started = performance.now();
  const pending = client.check('1.1.1.1');
  await new Promise((resolve) => setTimeout(resolve, 200));
  await setClock(t, '2026-06-01T12:00:01.000Z');
  t.same(await pending, snapshot.lookup('1.1.1.1'), 'the second check of the second is answered after waiting');
  t.ok(performance.now() - started >= 1000, 'after the Retry-After of 1 s');
  t.same(await answered(server, '/v1/check'), { '200': 2, '429': 1 });

  const refused = await failure(new IprClient({ baseUrl: `http://127.0.0.1:${server.port}`, apiKey: free, maxRetries: 0 }).check('8.8.8.8'));
  t.match(refused, { status: 429, code: 'rate_limit_exceeded', message: 'Per-second request limit exceeded', retryAfter: 1 });

  const tiny = await accountWithKey(store, 'tiny@example.com', 'tiny');
  const tinyClient = new IprClient({ baseUrl: `http://127.0.0.1:${server.port}`, apiKey: tiny, maxRetries: 5 });
  await tinyClient.check('8.8.8.8');
  await tinyClient.check('8.8.4.4');
  const spent = await failure(tinyClient.check('8.8.8.8'));
  t.match(spent, { status: 429, code: 'rate_limit_exceeded', message: 'Daily request limit exceeded', retryAfter: 12 * 3600 - 1 });
  t.ok(spent.retryAfter! > MAX_RETRY_AFTER, 'the wait to the next UTC midnight is handed to the caller');
  t.same(await answered(server, '/v1/check'), { '200': 4, '429': 3 }, 'not retried');
});

t.test('503 from the deployment kit\'s nginx and refused connections while the server is down: retried until it is back', async (t) => {
  const port = await freePort();
  let server = await startServer(t, { port });
  const key = await accountWithKey(accountStore(t, server.dataDir), 'ent@example.com', 'enterprise');
  const proxyPort = await freePort();
  await startNginx(
    t,
    // No upstream keep-alive here: ipr serve waits for idle connections to time out (about 10 s) before it exits.
    `  upstream ipr { server 127.0.0.1:${port}; }
  server {
    listen 127.0.0.1:${proxyPort};
    include ${path.join(root, 'deploy', 'nginx', 'ipr-locations.conf')};
  }`,
    [proxyPort],
  );
  const viaNginx = `http://127.0.0.1:${proxyPort}`;
  const direct = `http://127.0.0.1:${port}`;
  t.same(await new IprClient({ baseUrl: viaNginx, apiKey: key }).check('8.8.8.8'), snapshot.lookup('8.8.8.8'), 'through nginx');

  await server.stop();
  const down = await failure(new IprClient({ baseUrl: viaNginx, apiKey: key, maxRetries: 0 }).check('8.8.8.8'));
  t.match(down, { status: 503, code: 'unavailable', message: 'The service is starting or shutting down', retryAfter: 2 });
  const started = performance.now();
  const refused = await failure(new IprClient({ baseUrl: direct, apiKey: key, maxRetries: 2 }).check('8.8.8.8'));
  t.match(refused, { status: 0, code: 'network_error', message: /ECONNREFUSED \(3 attempts\)/, retryAfter: null });
  t.ok(performance.now() - started >= 375, 'after backoffs of at least 125 and 250 ms');

  // Retried, through nginx and directly, while the server starts again on its port.
  const pending = [
    new IprClient({ baseUrl: viaNginx, apiKey: key, maxRetries: 8 }).checkBatch(['8.8.8.8', 'nope']),
    new IprClient({ baseUrl: direct, apiKey: key, maxRetries: 8 }).check('8.8.8.8'),
  ] as const;
  await new Promise((resolve) => setTimeout(resolve, 500));
  server = await startServer(t, { port, dataDir: server.dataDir });
  t.same(await pending[0], snapshot.lookupMany(['8.8.8.8', 'nope']), 'through nginx once the server is back');
  t.same(await pending[1], snapshot.lookup('8.8.8.8'), 'directly once the server is back');

  const resets = await tcpServer(t, (socket) => socket.resetAndDestroy());
  const reset = await failure(new IprClient({ baseUrl: `http://127.0.0.1:${resets.port}`, apiKey: key, maxRetries: 3 }).check('8.8.8.8'));
  t.match(reset, { status: 0, code: 'network_error', message: /\(4 attempts\)/ });
  t.equal(resets.connections(), 4, 'the first attempt and three retries');
});

t.test('timeouts: an attempt that gets no answer in timeoutMs is retried, then thrown as timeout', async (t) => {
  const silent = await tcpServer(t, () => {});
  const started = performance.now();
  const timedOut = await failure(new IprClient({ baseUrl: `http://127.0.0.1:${silent.port}`, apiKey: 'ipr_x', timeoutMs: 200, maxRetries: 2 }).check('8.8.8.8'));
  t.match(timedOut, { status: 0, code: 'timeout', message: /within 200 ms \(3 attempts\)/ });
  t.equal(silent.connections(), 3);
  t.ok(performance.now() - started >= 3 * 200, 'three attempts of 200 ms');

  // The real server stops answering (SIGSTOP) and comes back (SIGCONT) while the client retries.
  const key = await accountWithKey(store, 'stopped@example.com', 'enterprise');
  server.process.kill('SIGSTOP');
  t.teardown(() => server.process.kill('SIGCONT'));
  const pending = new IprClient({ baseUrl: `http://127.0.0.1:${server.port}`, apiKey: key, timeoutMs: 300, maxRetries: 8 }).check('204.8.96.141');
  await new Promise((resolve) => setTimeout(resolve, 700));
  server.process.kill('SIGCONT');
  const result: CheckResult = await pending;
  t.same(result, snapshot.lookup('204.8.96.141'));
});
