// Limits per key and plan (docs/API.md "Limits"), on the server's test clock: daily
// and per-second windows and their headers, day rollover, the per-address
// limit for requests without a valid key, exactness under concurrency across
// worker threads, and usage that survives restarts (kill -9 included).
import http from 'node:http';
import t from 'tap';
import { dayOf } from '../src/store/accounts.js';
import { accountStore, accountWithKey, check, dataDirWithFullSnapshot, plansFile, request, setClock, startServer } from './server.js';

const NOON = Date.parse('2026-03-01T12:00:00.000Z');
const MIDNIGHT = Date.parse('2026-03-02T00:00:00.000Z') / 1000;

/** The default plans and small ones that make limits quick to reach. */
const SMALL_PLANS: Record<string, [number | null, number]> = {
  five_a_day: [5, 100],
  fifty_a_day: [50, 1000],
  ten_a_second: [null, 10],
};

t.test('daily window: headers, 429 with retry_after to midnight, rollover', async (t) => {
  const server = await startServer(t, { clock: NOON, env: { IPR_PLANS_CONFIG: plansFile(t, SMALL_PLANS) } });
  const store = accountStore(t, server.dataDir);
  const key = await accountWithKey(store, 'five@example.com', 'five_a_day');
  for (let i = 1; i <= 5; i++) {
    const r = await check(server.port, key, { ip: '8.8.8.8' });
    t.equal(r.status, 200);
    t.same([r.headers['x-ratelimit-limit'], r.headers['x-ratelimit-remaining'], r.headers['x-ratelimit-reset']], ['5', String(5 - i), String(MIDNIGHT)]);
  }
  const refused = await check(server.port, key, { ip: '8.8.8.8' });
  t.equal(refused.status, 429);
  t.same(refused.json, { error: 'rate_limit_exceeded', message: 'Daily request limit exceeded', details: {}, retry_after: 12 * 3600 });
  t.equal(refused.headers['retry-after'], String(12 * 3600));
  t.same([refused.headers['x-ratelimit-limit'], refused.headers['x-ratelimit-remaining'], refused.headers['x-ratelimit-reset']], ['5', '0', String(MIDNIGHT)]);

  await setClock(t, '2026-03-01T23:59:59.500Z');
  const last = await check(server.port, key, { ip: '8.8.8.8' });
  t.equal(last.json.retry_after, 1, 'half a second to midnight: retry after 1');
  await setClock(t, '2026-03-02T00:00:00.000Z');
  const next = await check(server.port, key, { ip: '8.8.8.8' });
  t.equal(next.status, 200, 'a new UTC day');
  t.equal(next.headers['x-ratelimit-remaining'], '4');
  t.equal(next.headers['x-ratelimit-reset'], String(MIDNIGHT + 86_400));

  // Both days reach the store (the day before's final count after the rollover).
  await new Promise((resolve) => setTimeout(resolve, 1300));
  const id = store.listKeys('five@example.com')[0]!.id;
  t.equal(store.usage(id, '2026-03-01'), 5, '429s did not count');
  t.equal(store.usage(id, '2026-03-02'), 1);
});

t.test('per-second window: free 1/s with day headers; enterprise headers describe the second', async (t) => {
  const server = await startServer(t, { clock: NOON });
  const store = accountStore(t, server.dataDir);
  const free = await accountWithKey(store, 'free@example.com', 'free');
  const enterprise = await accountWithKey(store, 'ent@example.com', 'enterprise');
  t.equal((await check(server.port, free, { ip: '8.8.8.8' })).status, 200);
  const refused = await check(server.port, free, { ip: '8.8.8.8' });
  t.equal(refused.status, 429);
  t.same(refused.json, { error: 'rate_limit_exceeded', message: 'Per-second request limit exceeded', details: {}, retry_after: 1 });
  t.equal(refused.headers['retry-after'], '1');
  t.same([refused.headers['x-ratelimit-limit'], refused.headers['x-ratelimit-remaining']], ['100', '99'], 'a daily plan shows its day');
  await setClock(t, NOON + 1000);
  t.equal((await check(server.port, free, { ip: '8.8.8.8' })).status, 200, 'the next second');

  const e = await check(server.port, enterprise, { ip: '8.8.8.8' });
  t.same([e.headers['x-ratelimit-limit'], e.headers['x-ratelimit-remaining'], e.headers['x-ratelimit-reset']], ['100', '99', String((NOON + 1000) / 1000 + 1)]);
});

t.test('requests without a valid key: 20 per second per address, then 429', async (t) => {
  const server = await startServer(t, { clock: NOON });
  const statuses: number[] = [];
  for (let i = 0; i < 25; i++) statuses.push((await check(server.port, 'ipr_guessguessguessguessguess', { ip: '8.8.8.8' })).status);
  t.same(statuses, [...new Array(20).fill(401), ...new Array(5).fill(429)]);
  const r = await check(server.port, null, { ip: '8.8.8.8' });
  t.equal(r.status, 429);
  t.same([r.headers['x-ratelimit-limit'], r.headers['x-ratelimit-remaining'], r.headers['retry-after']], ['20', '0', '1']);
  t.equal(r.json.message, 'Per-second request limit exceeded');
  await setClock(t, NOON + 1000);
  t.equal((await check(server.port, null, { ip: '8.8.8.8' })).status, 401);
});

t.test('exact under concurrency across four worker threads', async (t) => {
  const server = await startServer(t, { clock: NOON, workers: 4, env: { IPR_PLANS_CONFIG: plansFile(t, SMALL_PLANS) } });
  const store = accountStore(t, server.dataDir);
  const daily = await accountWithKey(store, 'fifty@example.com', 'fifty_a_day');
  const perSecond = await accountWithKey(store, 'ten@example.com', 'ten_a_second');
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  t.teardown(() => agent.destroy());
  const burst = async (key: string, n: number) => {
    const replies = await Promise.all(Array.from({ length: n }, () => check(server.port, key, { ip: '8.8.8.8' }, { agent })));
    return { ok: replies.filter((r) => r.status === 200).length, limited: replies.filter((r) => r.status === 429).length };
  };
  t.same(await burst(daily, 300), { ok: 50, limited: 250 }, '50 a day: exactly 50 of 300 concurrent requests');
  t.same(await burst(perSecond, 300), { ok: 10, limited: 290 }, '10 a second: exactly 10 in one second');
});

t.test('usage survives a restart and a kill -9 (at most the last second lost); last used is recorded', async (t) => {
  const dataDir = dataDirWithFullSnapshot(t);
  const first = await startServer(t, { dataDir });
  const store = accountStore(t, dataDir);
  const key = await accountWithKey(store, 'pro@example.com', 'pro');
  for (let i = 0; i < 30; i++) await check(first.port, key, { ip: '8.8.8.8' });
  await new Promise((resolve) => setTimeout(resolve, 1500));
  t.equal(await first.stop('SIGKILL'), null, 'killed');
  const id = store.listKeys('pro@example.com')[0]!.id;
  t.equal(store.usage(id, dayOf(Date.now())), 30, 'persisted before the kill');
  t.ok(store.listKeys('pro@example.com')[0]!.lastUsed, 'last used recorded');

  const second = await startServer(t, { dataDir });
  const r = await check(second.port, key, { ip: '8.8.8.8' });
  t.equal(r.headers['x-ratelimit-remaining'], String(100_000 - 31), 'the day continues from the persisted count');
  for (let i = 0; i < 9; i++) await check(second.port, key, { ip: '8.8.8.8' });
  t.equal(await second.stop('SIGTERM'), 0, 'graceful stop exits 0');
  t.equal(store.usage(id, dayOf(Date.now())), 40, 'a graceful stop flushes everything');
});
