// Load generation for the HTTP benchmarks: a real `ipr serve` process, keys
// for it, and autocannon against it with POST /v1/check over many keys and
// seeded addresses, requests per second recorded second by second with
// wall-clock times (to line them up with events such as a publication).
import { execFileSync, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const cli = path.join(root, 'dist', 'cli', 'main.js');

/**
 * The data folder a benchmark measures: BENCH_DATA when set (a folder with a
 * published snapshot), else the full dataset (sources/feeds.sources.json)
 * built into `work`, in a process of its own.
 */
export function benchDataDir(work) {
  if (process.env.BENCH_DATA !== undefined) return process.env.BENCH_DATA;
  const dataDir = path.join(work, 'data');
  process.stderr.write('building the full dataset (sources/feeds.sources.json)...\n');
  execFileSync(process.execPath, [path.join(root, 'bench', 'build-trial.js'), path.join(root, 'sources', 'feeds.sources.json'), dataDir], { stdio: 'ignore' });
  return dataDir;
}

/**
 * Creates an account on `plan` in `dataDir` and `count` keys for it; returns the keys.
 * Enterprise keys allow 100 requests a second each: a load of R requests a
 * second needs more than R / 100 of them.
 */
export function createKeys(dataDir, count, plan = 'enterprise') {
  const email = `bench-${plan}-${randomUUID().slice(0, 8)}@example.com`;
  execFileSync(process.execPath, [cli, 'accounts', 'create', '--data', dataDir, '--email', email, '--plan', plan], { input: 'a bench password', stdio: ['pipe', 'ignore', 'ignore'] });
  const out = execFileSync(process.execPath, [cli, 'keys', 'create', '--data', dataDir, '--account', email, '--name', 'bench', '--count', String(count)], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'ignore'],
    maxBuffer: 1 << 26,
  });
  return out.trim().split('\n');
}

/** Starts `ipr serve` on a free port of 127.0.0.1; resolves { port, process, output(), stop() }. */
export function startServer(dataDir, { workers = 2, args = [] } = {}) {
  const child = spawn(process.execPath, [cli, 'serve', '--data', dataDir, '--host', '127.0.0.1', '--port', '0', '--workers', String(workers), ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (d) => (output += d));
  child.stderr.on('data', (d) => (output += d));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${output}`)), 60_000);
    child.once('exit', (code) => reject(new Error(`server exited with ${code}:\n${output}`)));
    child.stdout.on('data', () => {
      const match = /serving http:\/\/[^:]+:([0-9]+)\/v1/.exec(output);
      if (!match) return;
      clearTimeout(timer);
      resolve({
        port: Number(match[1]),
        process: child,
        output: () => output,
        stop: () => new Promise((done) => (child.exitCode !== null ? done(child.exitCode) : (child.once('exit', done), child.kill('SIGTERM')))),
      });
    });
  });
}

/**
 * Runs autocannon against POST /v1/check of the server on `port` for
 * `duration` seconds, each request with the next key and the next address
 * (round robin). Resolves the totals and the requests of every second, each
 * stamped with the wall-clock time (ms) at which its second ended.
 */
export function runLoad({ port, keys, addresses, connections = 64, duration = 10 }) {
  const headers = keys.map((key) => ({ 'content-type': 'application/json', authorization: `Bearer ${key}` }));
  const bodies = addresses.map((ip) => JSON.stringify({ ip }));
  let next = 0;
  const seconds = [];
  const instance = autocannon({
    url: `http://127.0.0.1:${port}`,
    connections,
    duration,
    requests: [
      {
        method: 'POST',
        path: '/v1/check',
        setupRequest(request) {
          next++;
          request.headers = headers[next % headers.length];
          request.body = bodies[next % bodies.length];
          return request;
        },
      },
    ],
  });
  instance.on('tick', ({ counter }) => seconds.push({ at: Date.now(), requests: counter }));
  return new Promise((resolve, reject) => {
    instance.on('done', (results) =>
      resolve({
        seconds,
        total: results.requests.total,
        perSecond: results.requests.average,
        statuses: Object.fromEntries(Object.entries(results.statusCodeStats).map(([code, { count }]) => [code, Number(count)])),
        errors: results.errors,
        timeouts: results.timeouts,
        latencyMs: { p50: results.latency.p50, p99: results.latency.p99 },
      }),
    );
    instance.on('error', reject);
  });
}

/**
 * CPU time a process has used, user and system, in seconds (Linux: /proc).
 * Per request, it measures a server's cost far more steadily than requests per
 * second on a machine shared with the load generator and other work.
 */
export function cpuSeconds(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
}

/** Linux's USER_HZ: the unit of /proc/<pid>/stat times. */
const CLOCK_TICKS = 100;
