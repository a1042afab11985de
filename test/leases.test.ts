/**
 * Limits by leases across nodes (src/server/leases.ts), each node a process
 * of its own (bench/lease-node.js: a real LeaseManager and worker threads
 * admitting from a real shared LeaseTable) against a real redis-server:
 * the daily limit exact over three nodes, the per-second bound, budget held
 * by an idle node given back, usage that adds up, an outage (SIGSTOP) with
 * usage added back on recovery, a revoked key, and calls retried through a
 * stalled network applied once.
 */
import t from 'tap';
import type { Test } from 'tap';
import { dayOf } from '../src/store/accounts.js';
import { MIN_LEASE } from '../src/server/leases.js';
import { accountKeys, accountTag, RedisCustomerStore } from '../src/store/redis.js';
import { runLeaseNodes as runNodes, startRedis, startRelay, type NodeResult } from './redis.js';

async function customer(t: Test, url: string, plan: string) {
  const store = await RedisCustomerStore.open(url);
  t.teardown(() => store.close());
  const email = `${plan}@example.com`;
  await store.createAccount(email, 'a long password', plan);
  const { record } = await store.createKey(email, 'k');
  return { store, record, email, keys: accountKeys(store.connection, accountTag(email)) };
}

const sum = (results: NodeResult[], k = 0) => results.reduce((n, r) => n + r.admitted[k]!, 0);

t.test('the daily limit is exact across three nodes hammering one key', async (t) => {
  const redis = await startRedis(t);
  const { store, record, keys } = await customer(t, redis.url, 'small');
  const plan = { name: 'small', requestsPerDay: 300, requestsPerSecond: 100_000 };
  const results = await runNodes(t, [0, 1, 2].map(() => ({ url: redis.url, keys: [{ id: record.id, account: record.account, plan }], ms: 3000, workers: 2 })));
  t.equal(sum(results), 300, `admitted ${results.map((r) => r.admitted[0]).join(' + ')}: exactly the limit`);
  t.ok(results.some((r) => r.refused.day > 0), 'nodes refuse by the daily limit once the day is used up');
  t.ok(results.filter((r) => r.admitted[0]! > 0).length >= 2, 'more than one node served the key');
  const today = dayOf(Date.now());
  t.same(await store.usageRange(record, today, today), [{ day: today, requests: 300 }], 'usage adds up to the answers given');
  const lastUsed = (await store.keyByDigest(record.hash))!.lastUsed;
  t.ok(lastUsed !== null && Date.now() - Date.parse(lastUsed) < 10_000, 'last used was recorded');
  const reserved = await store.connection.command<string>(keys.lease(record.id), ['HGET', keys.lease(record.id), `r:${Math.floor(Date.now() / 86_400_000)}`]);
  t.equal(Number(reserved), 300, 'every reserved token was used');
});

t.test('the per-second limit holds in every second of the Redis clock', async (t) => {
  const redis = await startRedis(t);
  const { record } = await customer(t, redis.url, 'burst');
  const plan = { name: 'burst', requestsPerDay: null, requestsPerSecond: 20 };
  const results = await runNodes(t, [0, 1, 2].map(() => ({ url: redis.url, keys: [{ id: record.id, account: record.account, plan }], ms: 5000, record: true })));
  const times = results.flatMap((r) => r.times[0]!);
  const seconds = new Map<number, number>();
  for (const ms of times) seconds.set(Math.floor(ms / 1000), (seconds.get(Math.floor(ms / 1000)) ?? 0) + 1);
  const worst = Math.max(...seconds.values());
  t.ok(worst <= 20, `at most 20 in any second (busiest: ${worst}; per second: ${[...seconds.values()].join(' ')})`);
  const full = [...seconds.keys()].sort().slice(1, -1);
  const served = full.reduce((n, s) => n + seconds.get(s)!, 0);
  t.ok(served >= full.length * 10, `the key was served (${served} in ${full.length} whole seconds)`);
  t.ok(results.some((r) => r.refused.second > 0), 'requests over the limit were refused by the per-second limit');
});

t.test('an idle node gives its budget back, and the others get it', async (t) => {
  const redis = await startRedis(t);
  const { store, record } = await customer(t, redis.url, 'small');
  const plan = { name: 'small', requestsPerDay: 1000, requestsPerSecond: 100_000 };
  const key = { id: record.id, account: record.account, plan };
  // Node A asks 200 a second for 1.5 s (its leases sized to that), then is idle; node B asks 1,000 a second throughout.
  const [a, b] = await runNodes(t, [
    { url: redis.url, keys: [key], ms: 1500, holdMs: 4000, rate: 200, idleReturnMs: 1000 },
    { url: redis.url, keys: [key], ms: 5000, rate: 1000 },
  ]);
  t.ok(a!.admitted[0]! > 0, 'A served its requests');
  t.equal(a!.admitted[0]! + b!.admitted[0]!, 1000, `exactly the limit (A ${a!.admitted[0]}, B ${b!.admitted[0]})`);
  t.equal(a!.heldAtEnd[0], 0, 'A gave back what it held');
  const today = dayOf(Date.now());
  t.same(await store.usageRange(record, today, today), [{ day: today, requests: 1000 }]);
});

t.test('Redis stopped (SIGSTOP): nodes serve from their leases, and usage is added back on recovery', async (t) => {
  const redis = await startRedis(t);
  const { store, record, keys } = await customer(t, redis.url, 'pro');
  const plan = { name: 'pro', requestsPerDay: 100_000, requestsPerSecond: 100_000 };
  const key = { id: record.id, account: record.account, plan };
  let paused = { from: 0, to: 0 };
  const results = await runNodes(t, [0, 1, 2].map(() => ({ url: redis.url, keys: [key], ms: 4000, rate: 300, holdMs: 1500, record: true })), async () => {
    await new Promise((resolve) => setTimeout(resolve, 1000));
    redis.pause();
    const from = Date.now();
    await new Promise((resolve) => setTimeout(resolve, 2000));
    redis.resume();
    paused = { from, to: Date.now() };
  });
  const admitted = sum(results);
  const during = results.map((r) => r.times[0]!.filter((ms) => ms > paused.from + 100 && ms < paused.to - 100).length);
  t.ok(during.every((n) => n > 100), `every node kept admitting while Redis was stopped (${during.join(', ')} in the ${paused.to - paused.from} ms)`);
  t.equal(results.reduce((n, r) => n + r.refused.day + r.refused.second, 0), 0, 'none refused by a limit');
  const today = dayOf(Date.now());
  t.same(await store.usageRange(record, today, today), [{ day: today, requests: admitted }], 'usage counted during the stop was added back');
  const reserved = Number(await store.connection.command<string>(keys.lease(record.id), ['HGET', keys.lease(record.id), `r:${Math.floor(Date.now() / 86_400_000)}`]));
  t.equal(reserved, admitted, 'reservations equal what was admitted: leases given back, credit added');
});

t.test('Redis stopped while a node holds only its first lease: one more lease on credit, then nothing until it is back', async (t) => {
  const redis = await startRedis(t);
  const { store, record, keys } = await customer(t, redis.url, 'pro');
  const plan = { name: 'pro', requestsPerDay: 100_000, requestsPerSecond: 100_000 };
  let paused = { from: 0, to: 0 };
  const [result] = await runNodes(t, [{ url: redis.url, keys: [{ id: record.id, account: record.account, plan }], ms: 4000, rate: 200, holdMs: 1000, record: true }], async () => {
    redis.pause();
    const from = Date.now();
    await new Promise((resolve) => setTimeout(resolve, 2500));
    redis.resume();
    paused = { from, to: Date.now() };
  });
  const during = result!.times[0]!.filter((ms) => ms < paused.to).length;
  t.equal(during, 2 * MIN_LEASE, `while Redis was stopped: its first lease (${MIN_LEASE}) and as much again on credit`);
  t.ok(result!.admitted[0]! > during, 'served again after');
  const today = dayOf(Date.now());
  t.same(await store.usageRange(record, today, today), [{ day: today, requests: result!.admitted[0] }], 'usage, credit included, added back');
  const reserved = Number(await store.connection.command<string>(keys.lease(record.id), ['HGET', keys.lease(record.id), `r:${Math.floor(Date.now() / 86_400_000)}`]));
  t.equal(reserved, result!.admitted[0], 'the credit was added to the reservations');
});

t.test('a revoked key gets no lease', async (t) => {
  const redis = await startRedis(t);
  const { store, record, email } = await customer(t, redis.url, 'small');
  await store.revokeKey(email, record.prefix);
  const plan = { name: 'small', requestsPerDay: 300, requestsPerSecond: 100 };
  const [result] = await runNodes(t, [{ url: redis.url, keys: [{ id: record.id, account: record.account, plan }], ms: 1000 }]);
  t.equal(result!.admitted[0], 0);
  t.ok(result!.refused.revoked > 0, 'refused as revoked');
});

t.test('a call retried after a stalled network is applied once', async (t) => {
  const redis = await startRedis(t);
  const relay = await startRelay(t, redis.port);
  const { store, record, keys } = await customer(t, redis.url, 'small');
  const plan = { name: 'small', requestsPerDay: 5000, requestsPerSecond: 100_000 };
  // Stall the node's link as it starts (holding only its first small lease): its next calls time out,
  // Redis gets them when the link passes traffic again, and the node sends them again meanwhile.
  const [result] = await runNodes(t, [{ url: relay.url, keys: [{ id: record.id, account: record.account, plan }], ms: 4000, rate: 500, holdMs: 500 }], async () => {
    relay.stall();
    await new Promise((resolve) => setTimeout(resolve, 2000));
    relay.resume();
  });
  const reserved = Number(await store.connection.command<string>(keys.lease(record.id), ['HGET', keys.lease(record.id), `r:${Math.floor(Date.now() / 86_400_000)}`]));
  const today = dayOf(Date.now());
  t.ok(result!.errors.some((e) => /did not answer/.test(e)), 'calls timed out while the link stalled');
  t.same(await store.usageRange(record, today, today), [{ day: today, requests: result!.admitted[0] }], 'usage counted once');
  t.equal(reserved, result!.admitted[0], 'reservations counted once');
});
