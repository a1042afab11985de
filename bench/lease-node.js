// One simulated node of a deployment for the lease tests and benchmark
// (test/leases.test.ts, bench/redis-leases.js): a real LeaseManager on this
// process's main thread, keeping a real shared LeaseTable topped up from
// Redis, and worker threads that admit requests from the table as a
// server's workers would, as fast as they can or at a set rate per key.
//
//   node bench/lease-node.js '<json options>'
//
// Options: url, keys [{ id, account, plan: { name, requestsPerDay, requestsPerSecond } }],
// workers (1), ms (how long requests are made), holdMs (how long the node
// keeps running after that, before it shuts down), rate (requests per second
// per key; 0: as fast as possible), record (keep each admission's time),
// idleReturnMs, steadyAfterMs (also report the calls made and requests
// admitted after this long, per second of the run). It prints "ready", waits for a line on stdin, runs, shuts
// down (returning what it holds) and prints one line of JSON: admitted and
// refused counts, admission times when recorded, calls made to Redis.
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { createInterface } from 'node:readline';

const { LeaseManager, LeaseTable, createLeaseState } = await import('../dist/server/leases.js');

if (isMainThread) {
  const { RedisConnection } = await import('../dist/store/redis-connection.js');
  const options = JSON.parse(process.argv[2]);
  const connection = await RedisConnection.open(options.url, { name: 'lease-node' });
  const state = createLeaseState(options.keys.length);
  const table = new LeaseTable(state);
  const errors = [];
  const manager = new LeaseManager(connection, table, { idleReturnMs: options.idleReturnMs, onError: (e) => errors.push(e.message) });
  manager.start();
  options.keys.forEach((key, slot) => manager.track(slot, key));
  // Workers are started (and their modules loaded) before "ready", and begin together on "go".
  const go = new Int32Array(new SharedArrayBuffer(4));
  const workers = Array.from(
    { length: options.workers ?? 1 },
    (_, index) =>
      new Worker(new URL(import.meta.url), {
        workerData: { state, go: go.buffer, keys: options.keys, index, workers: options.workers ?? 1, ms: options.ms, rate: options.rate ?? 0, record: options.record ?? false },
      }),
  );
  const message = (w) => new Promise((resolve, reject) => (w.once('message', resolve), w.once('error', reject), w.once('exit', () => reject(new Error('a worker ended early')))));
  await Promise.all(workers.map(message));
  process.stdout.write('ready\n');
  await new Promise((resolve) => createInterface({ input: process.stdin }).once('line', resolve));
  Atomics.store(go, 0, 1);
  Atomics.notify(go, 0);
  let callsBeforeSteady = 0;
  let byBeforeSteady = { ...manager.callsBy };
  if (options.steadyAfterMs !== undefined) {
    setTimeout(() => {
      callsBeforeSteady = manager.calls;
      byBeforeSteady = { ...manager.callsBy };
    }, options.steadyAfterMs);
  }
  const results = await Promise.all(workers.map(message));
  const steadyCalls = manager.calls - callsBeforeSteady;
  const steadyCallsBy = Object.fromEntries(Object.entries(manager.callsBy).map(([why, n]) => [why, n - byBeforeSteady[why]]));
  await new Promise((resolve) => setTimeout(resolve, options.holdMs ?? 0));
  const held = options.keys.map((_, slot) => table.peek(slot, (s) => s.tokens));
  await manager.close();
  await connection.close();
  const sum = (field) => options.keys.map((_, k) => results.reduce((n, r) => n + r[field][k], 0));
  process.stdout.write(
    `${JSON.stringify({
      node: manager.nodeId,
      admitted: sum('admitted'),
      refused: Object.fromEntries(['day', 'second', 'pending', 'revoked'].map((kind) => [kind, results.reduce((n, r) => n + r.refused[kind], 0)])),
      times: options.keys.map((_, k) => results.flatMap((r) => r.times[k]).sort((a, b) => a - b)),
      calls: manager.calls,
      steadyCalls,
      steadyCallsBy,
      perSecond: results.reduce((sum, r) => r.perSecond.map((n, i) => n + (sum[i] ?? 0)), []),
      heldAtEnd: held,
      errors: errors.slice(0, 5),
    })}\n`,
  );
  process.exit(0);
} else {
  const { state, go, keys, index, workers, ms, rate, record } = workerData;
  const table = new LeaseTable(state);
  parentPort.postMessage('started');
  Atomics.wait(new Int32Array(go), 0, 0);
  const admitted = keys.map(() => 0);
  const times = keys.map(() => []);
  const refused = { day: 0, second: 0, pending: 0, revoked: 0 };
  const start = Date.now();
  const end = start + ms;
  const perSecond = Array.from({ length: Math.ceil(ms / 1000) + 1 }, () => 0);
  // Paced: each worker makes its share of `rate` per key per second, evenly spaced.
  const gapMs = rate > 0 ? (1000 * workers) / rate : 0;
  let next = Date.now() + (gapMs * index) / workers;
  while (Date.now() < end) {
    if (gapMs > 0) {
      const wait = next - Date.now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      next += gapMs;
    }
    for (let slot = 0; slot < keys.length; slot++) {
      const now = Date.now();
      let v = table.admitKey(slot, 0, keys[slot].plan, now);
      if (v.refusedBy === 'pending') {
        // What a server does with such a request: wait (briefly) for the manager, then ask again.
        await table.whenChanged(slot, 200);
        const later = Date.now();
        v = table.admitKey(slot, 0, keys[slot].plan, later);
        if (v.admitted) {
          admitted[slot]++;
          perSecond[Math.floor((later - start) / 1000)]++;
          if (record) times[slot].push(later);
          continue;
        }
      }
      if (v.admitted) {
        admitted[slot]++;
        perSecond[Math.floor((now - start) / 1000)]++;
        if (record) times[slot].push(now);
      } else {
        refused[v.refusedBy]++;
      }
    }
    // Let the thread's event loop run (the waits above need it) without slowing the loop much.
    if (gapMs === 0 && (admitted[0] + refused.second + refused.day) % 64 === 0) await new Promise((resolve) => setImmediate(resolve));
  }
  parentPort.postMessage({ admitted, refused, times, perSecond });
}
