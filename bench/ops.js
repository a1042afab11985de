// `npm run bench:ops`: what observability costs a request.
//   1. request metrics: a worker's per-request work for them (two clock reads,
//      WorkerMetrics.request: a few Atomics.add into shared counters) in a
//      loop: nanoseconds per request, and garbage collections during it
//      (none: nothing is allocated);
//   2. the access log: the same load (autocannon, many enterprise keys)
//      against a 2-worker server on the full dataset without and with
//      --access-log, rounds interleaved: the server's CPU time per request
//      (steady on a shared machine), requests per second and p99 latency.
// Results go to stdout and bench/results/ops-<time>.json.
import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PerformanceObserver } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { buildSnapshot } from '../dist/index.js';
import { createMetricsBuffer, elapsedMicros, nowMicros, WorkerMetrics } from '../dist/server/metrics.js';
import { seededAddresses } from './addresses.js';
import { cpuSeconds, createKeys, runLoad, startServer } from './load.js';
import { environment, median } from './report.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);
const DURATION = Number(process.env.BENCH_DURATION ?? 10);

function metricsCost(calls) {
  const metrics = new WorkerMetrics(createMetricsBuffer(2), 0);
  let collections = 0;
  const observer = new PerformanceObserver((list) => (collections += list.getEntries().length));
  const time = (body) => {
    const started = process.hrtime.bigint();
    body();
    return Number(process.hrtime.bigint() - started) / calls;
  };
  // Warm both loops up first, so that both are measured optimised.
  const withMetrics = () => {
    for (let i = 0; i < calls; i++) {
      const started = nowMicros();
      metrics.request(i & 3, 200, elapsedMicros(started));
    }
  };
  let sink = 0;
  const empty = () => {
    for (let i = 0; i < calls; i++) sink += i & 3;
  };
  withMetrics();
  empty();
  observer.observe({ entryTypes: ['gc'] });
  const ns = time(withMetrics);
  observer.disconnect();
  const baseline = time(empty);
  return { ns_per_request: ns - baseline, garbage_collections: collections, calls, sink };
}

const work = mkdtempSync(path.join(os.tmpdir(), 'ipr-bench-ops-'));
try {
  const env = environment();
  console.log(`observability benchmark ${env.date}, ${env.cpu} x${env.cores}, node ${env.node}, commit ${env.commit}`);

  const metrics = metricsCost(20_000_000);
  console.log(
    `\nrequest metrics: ${metrics.ns_per_request.toFixed(1)} ns per request (clock reads, counters, histogram, latency sum), ` +
      `${metrics.garbage_collections} garbage collections in ${metrics.calls.toLocaleString('en-US')} requests`,
  );

  const dataDir = path.join(work, 'data');
  await buildSnapshot({ sources: path.join(root, 'sources', 'feeds.sources.json'), dataDir });
  const keys = createKeys(dataDir, 1000);
  const addresses = seededAddresses(20_000, 20261123);
  const trials = { off: [], on: [] };
  let logBytes = 0;
  for (let round = 0; round < ROUNDS; round++) {
    for (const mode of ['off', 'on']) {
      const log = path.join(work, `access-${round}.log`);
      const server = await startServer(dataDir, { workers: 2, args: mode === 'on' ? ['--access-log', log] : [] });
      try {
        const cpu = cpuSeconds(server.process.pid);
        const r = await runLoad({ port: server.port, keys, addresses, connections: CONNECTIONS, duration: DURATION });
        const cpuMicros = ((cpuSeconds(server.process.pid) - cpu) / r.total) * 1e6;
        trials[mode].push({ cpu_us_per_request: cpuMicros, per_second: r.perSecond, p99_ms: r.latencyMs.p99, statuses: r.statuses, errors: r.errors });
        console.log(
          `  round ${round + 1}, access log ${mode}: ${cpuMicros.toFixed(1)} µs of server CPU per request, ` +
            `${Math.round(r.perSecond)} requests/s, p99 ${r.latencyMs.p99} ms, ${JSON.stringify(r.statuses)}`,
        );
      } finally {
        await server.stop();
      }
      if (mode === 'on') logBytes = statSync(log).size;
    }
  }
  const summary = Object.fromEntries(
    ['off', 'on'].map((mode) => [
      mode,
      {
        cpu_us_per_request: median(trials[mode].map((t) => t.cpu_us_per_request)),
        per_second: median(trials[mode].map((t) => t.per_second)),
        p99_ms: median(trials[mode].map((t) => t.p99_ms)),
      },
    ]),
  );
  const { off, on } = summary;
  console.log(
    `access log (median of ${ROUNDS}, ${CONNECTIONS} connections, ${keys.length} enterprise keys, ${DURATION} s each): ` +
      `server CPU per request ${off.cpu_us_per_request.toFixed(1)} -> ${on.cpu_us_per_request.toFixed(1)} µs ` +
      `(+${(((on.cpu_us_per_request - off.cpu_us_per_request) / off.cpu_us_per_request) * 100).toFixed(0)}%), ` +
      `${Math.round(off.per_second)} -> ${Math.round(on.per_second)} requests/s, p99 ${off.p99_ms} -> ${on.p99_ms} ms; ` +
      `${(logBytes / 2 ** 20).toFixed(0)} MiB of log in one run`,
  );
  console.log(
    `request metrics against a request: ${metrics.ns_per_request.toFixed(0)} ns of ${(off.cpu_us_per_request * 1000).toFixed(0)} ns ` +
      `(${((metrics.ns_per_request / (off.cpu_us_per_request * 1000)) * 100).toFixed(1)}%)`,
  );

  mkdirSync(path.join(root, 'bench', 'results'), { recursive: true });
  const file = path.join(root, 'bench', 'results', `ops-${env.date.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify({ environment: env, metrics, access_log: { trials, median: summary, log_bytes: logBytes } }, null, 2));
  console.log(`\nresults: ${path.relative(root, file)}`);
} finally {
  rmSync(work, { recursive: true, force: true });
}
