// The limit table's dirty ring (src/server/limits.ts): what usage.ts
// persists each second is exactly the keys counted since the last take,
// each once, whatever the size of the table and however many threads count.
import { Worker } from 'node:worker_threads';
import t from 'tap';
import type { Plan } from '../src/plans.js';
import { createLimitState, Limits } from '../src/server/limits.js';

const UNLIMITED: Plan = { name: 'test', requestsPerDay: null, requestsPerSecond: 2 ** 30 };
const DAY_MS = 86_400_000;
const NOW = Date.UTC(2026, 10, 23, 12);

t.test('only the keys counted since the last take, each once, in a large table', async (t) => {
  const limits = new Limits(createLimitState(100_000));
  t.same(limits.takeDirty(), [], 'nothing counted: nothing to write');
  for (const slot of [7, 99_999, 7, 42, 7]) limits.admitKey(slot, slot + 1000, UNLIMITED, NOW);
  const taken = limits.takeDirty();
  t.same(taken.map((k) => [k.slot, k.id, k.requests]), [[7, 1007, 3], [99_999, 100_999, 1], [42, 1042, 1]], 'in the order first counted, with the key the counts belong to');
  t.same(limits.takeDirty(), [], 'taken keys are clean');
  limits.admitKey(42, 1042, UNLIMITED, NOW + 1000);
  t.same(limits.takeDirty().map((k) => [k.slot, k.requests, k.lastUsedMs]), [[42, 2, NOW + 1000]], 'counted again: queued again');
});

t.test('a refusal counts nothing and queues nothing; a new day queues the final count of the day before', async (t) => {
  const limits = new Limits(createLimitState(16));
  const daily: Plan = { name: 'daily', requestsPerDay: 2, requestsPerSecond: 100 };
  limits.admitKey(3, 3, daily, NOW);
  limits.admitKey(3, 3, daily, NOW);
  limits.takeDirty();
  t.equal(limits.admitKey(3, 3, daily, NOW).admitted, false);
  t.same(limits.takeDirty(), [], 'refused: nothing to write');
  limits.admitKey(3, 3, daily, NOW + DAY_MS);
  const [k] = limits.takeDirty();
  t.match(k, { slot: 3, id: 3, day: Math.floor((NOW + DAY_MS) / DAY_MS), requests: 1, prevDay: Math.floor(NOW / DAY_MS), prevRequests: 2, rolled: true });
  limits.admitKey(3, 3, daily, NOW + DAY_MS);
  t.equal(limits.takeDirty()[0]!.rolled, false, 'the day before is written once');
});

t.test('keys counted by four threads at once: every count taken, none twice, across many laps of the ring', async (t) => {
  const KEYS = 1000;
  const state = createLimitState(KEYS);
  const limits = new Limits(state);
  const code = `
    import { workerData, parentPort } from 'node:worker_threads';
    const { Limits } = await import(workerData.limits);
    const limits = new Limits(workerData.state);
    const plan = { name: 'test', requestsPerDay: null, requestsPerSecond: 2 ** 30 };
    for (let i = 0; i < workerData.requests; i++) { const slot = (i * 7919 + workerData.seed) % workerData.keys; limits.admitKey(slot, slot, plan, workerData.now); }
    parentPort.postMessage('done');`;
  const limitsUrl = new URL('../dist/server/limits.js', import.meta.url).href;
  const REQUESTS = 200_000;
  const workers = [1, 2, 3, 4].map(
    (seed) => new Worker(code, { eval: true, workerData: { limits: limitsUrl, state, requests: REQUESTS, seed, keys: KEYS, now: NOW } }),
  );
  const done = Promise.all(workers.map((w) => new Promise((resolve) => w.once('message', resolve))));
  // Take while they count, as the main thread does every second.
  const last = new Map<number, number>(); // requests by slot
  let takes = 0;
  let finished = false;
  void done.then(() => (finished = true));
  let duplicates = 0;
  while (!finished) {
    const seen = new Set<number>();
    for (const k of limits.takeDirty()) {
      if (seen.has(k.slot)) duplicates++;
      seen.add(k.slot);
      last.set(k.slot, k.requests);
    }
    takes++;
    await new Promise((resolve) => setImmediate(resolve));
  }
  for (const k of limits.takeDirty()) last.set(k.slot, k.requests);
  t.equal(duplicates, 0, 'no key twice in one take');
  t.ok(takes > 1, `${takes} takes while counting`);
  const total = [...last.values()].reduce((a, b) => a + b, 0);
  t.equal(total, 4 * REQUESTS, 'the last counts taken add up to every admission');
  t.equal(last.size, KEYS, 'every key taken');
});

t.test('a slot taken by a new key starts from nothing, and its counts are taken under the new key', async (t) => {
  const limits = new Limits(createLimitState(16));
  limits.admitKey(5, 50, UNLIMITED, NOW);
  limits.admitKey(5, 50, UNLIMITED, NOW);
  // Key 50 revoked, its slot given to key 51 before the flush.
  limits.admitKey(5, 51, UNLIMITED, NOW + 10);
  t.same(limits.takeDirty().map((k) => [k.slot, k.id, k.requests]), [[5, 51, 1]]);
});
