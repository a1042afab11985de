/**
 * Redis faults never hang the store (src/store/redis-connection.ts): every
 * command ends within its time limit, with IprError store_unavailable, when
 * the server is stopped (SIGSTOP), killed, or behind a network that stalls;
 * added latency only makes commands slower; the store is used again once
 * Redis is back, with nothing lost.
 */
import t from 'tap';
import { IprError } from '../src/errors.js';
import { RedisCustomerStore } from '../src/store/redis.js';
import { startRedis, startRelay } from './redis.js';

const TIMEOUT_MS = 300;

async function timed<T>(work: Promise<T>): Promise<{ ms: number; value?: T; error?: unknown }> {
  const started = Date.now();
  try {
    const value = await work;
    return { ms: Date.now() - started, value };
  } catch (error) {
    return { ms: Date.now() - started, error };
  }
}

t.test('SIGSTOP: commands fail within the time limit, and work again after SIGCONT', async (t) => {
  const redis = await startRedis(t);
  const store = await RedisCustomerStore.open(redis.url, { commandTimeoutMs: TIMEOUT_MS });
  t.teardown(() => store.close());
  await store.createAccount('ann@example.com', 'a long password', 'pro');
  redis.pause();
  const outcomes = await Promise.all([timed(store.account('ann@example.com')), timed(store.createKey('ann@example.com', 'k')), timed(store.countAttempt([{ name: 'x', max: 5, windowMs: 1000 }], 0))]);
  for (const o of outcomes) {
    t.match(o.error, { code: 'store_unavailable', message: new RegExp(`did not answer [A-Z]+ within ${TIMEOUT_MS} ms`) });
    t.ok(o.ms < TIMEOUT_MS + 200, `failed after ${o.ms} ms`);
  }
  t.equal(store.connection.healthy, false);
  redis.resume();
  const deadline = Date.now() + 5000;
  let account;
  while (Date.now() < deadline) {
    try {
      account = await store.account('ann@example.com');
      break;
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
  t.match(account, { email: 'ann@example.com' }, 'answers again after SIGCONT');
  t.equal(store.connection.healthy, true);
});

t.test('a stalled network: the same; added latency: slower, not failed', async (t) => {
  const redis = await startRedis(t);
  const relay = await startRelay(t, redis.port);
  const store = await RedisCustomerStore.open(relay.url, { commandTimeoutMs: TIMEOUT_MS });
  t.teardown(() => store.close());
  await store.createAccount('bob@example.com', 'a long password', 'pro');
  relay.setLatency(50);
  const slow = await timed(store.account('bob@example.com'));
  t.match(slow.value, { email: 'bob@example.com' });
  t.ok(slow.ms >= 100, `two 50 ms hops: ${slow.ms} ms`);
  relay.setLatency(0);
  relay.stall();
  const stalled = await timed(store.account('bob@example.com'));
  t.match(stalled.error, { code: 'store_unavailable' });
  t.ok(stalled.ms < TIMEOUT_MS + 200, `failed after ${stalled.ms} ms`);
  relay.resume();
  const deadline = Date.now() + 10_000;
  let answered = false;
  while (!answered && Date.now() < deadline) {
    answered = (await timed(store.account('bob@example.com'))).value !== undefined;
    if (!answered) await new Promise((resolve) => setTimeout(resolve, 50));
  }
  t.ok(answered, 'answers again once the network passes traffic');
});

t.test('killed, then restarted: unavailable at once, then used again with what it had', async (t) => {
  const redis = await startRedis(t);
  const store = await RedisCustomerStore.open(redis.url, { commandTimeoutMs: TIMEOUT_MS });
  t.teardown(() => store.close());
  await store.createAccount('cat@example.com', 'a long password', 'pro');
  const { record } = await store.createKey('cat@example.com', 'k');
  await redis.kill();
  const down = await timed(store.keyByDigest(record.hash));
  t.ok(down.error instanceof IprError && down.error.code === 'store_unavailable', 'store_unavailable');
  t.ok(down.ms < TIMEOUT_MS + 200, `after ${down.ms} ms`);
  await redis.restart();
  const deadline = Date.now() + 10_000;
  let found;
  while (found === undefined && Date.now() < deadline) {
    found = (await timed(store.keyByDigest(record.hash))).value;
    if (found === undefined) await new Promise((resolve) => setTimeout(resolve, 50));
  }
  t.same(found, record, 'the key, from the append-only file, through the same store object');
});

t.test('connecting to a store that is not there fails within the limit, naming it without its password', async (t) => {
  const redis = await startRedis(t);
  redis.pause();
  const started = Date.now();
  await t.rejects(RedisCustomerStore.open(`redis://user:topsecret@127.0.0.1:${redis.port}`, { commandTimeoutMs: TIMEOUT_MS }), {
    code: 'store_unavailable',
    message: new RegExp(`redis://user:\\*\\*\\*@127\\.0\\.0\\.1:${redis.port}`),
  });
  t.ok(Date.now() - started < 1500, `within ${Date.now() - started} ms`);
  redis.resume();
});
