// How many Redis commands a node's lease manager issues at steady state, for
// N active keys at R requests a second each (the goal: well under 1% of the
// requests). Each trial is one simulated node (bench/lease-node.js: a real
// LeaseManager and a worker thread admitting paced requests from the shared
// table) in a process of its own, against a redis-server this benchmark
// starts on a free loopback port. Calls are counted after the first
// BENCH_STEADY_S seconds (leases and allowances sized by then) up to the end
// of the requests (BENCH_SECONDS), not the calls of the shutdown.
//
//   npm run bench:leases
//
// Results go to stdout and bench/results/leases-<time>.json.
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { environment } from './report.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const { RedisCustomerStore } = await import('../dist/store/redis.js');

// The window is one allowance term (60 s) long, after the first term: every key renews once in it.
const SECONDS = Number(process.env.BENCH_SECONDS ?? 130);
const STEADY_S = Number(process.env.BENCH_STEADY_S ?? 70);
const all = [
  { keys: 1000, rate: 1, plan: { name: 'pro', requestsPerDay: 100_000, requestsPerSecond: 50 } },
  { keys: 1000, rate: 10, plan: { name: 'pro', requestsPerDay: 100_000, requestsPerSecond: 50 } },
  { keys: 100, rate: 40, plan: { name: 'pro', requestsPerDay: 100_000, requestsPerSecond: 50 } },
  { keys: 100, rate: 40, plan: { name: 'enterprise', requestsPerDay: null, requestsPerSecond: 100 } },
];
// BENCH_TRIALS=1,3 runs some of them (by number, from 0).
const trials = process.env.BENCH_TRIALS ? process.env.BENCH_TRIALS.split(',').map((i) => all[Number(i)]) : all;

async function freePort() {
  return new Promise((resolve) => {
    const probe = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

const dir = mkdtempSync(path.join(os.tmpdir(), 'ipr-bench-leases-'));
const port = await freePort();
const redis = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
for (let i = 0; ; i++) {
  try {
    if (execFileSync('redis-cli', ['-p', String(port), 'PING'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim() === 'PONG') break;
  } catch {}
  if (i > 100) throw new Error('redis-server did not start');
  await new Promise((resolve) => setTimeout(resolve, 50));
}
const url = `redis://127.0.0.1:${port}`;

const env = environment();
console.log(`lease benchmark ${env.date}, ${env.cpu} x${env.cores}, node ${env.node}, commit ${env.commit}, redis ${execFileSync('redis-server', ['--version'], { encoding: 'utf8' }).split(' ')[2]}`);
console.log(`one node per trial, ${SECONDS} s each, calls counted from ${STEADY_S} s on\n`);
const rows = [];
try {
  const store = await RedisCustomerStore.open(url);
  for (const [i, trial] of trials.entries()) {
    const email = `bench${i}@example.com`;
    await store.createAccount(email, 'a bench password', trial.plan.name);
    const keys = [];
    for (let k = 0; k < trial.keys; k++) keys.push({ id: (await store.createKey(email, `k${k}`)).record.id, account: email, plan: trial.plan });
    const options = { url, keys, ms: SECONDS * 1000, rate: trial.rate, steadyAfterMs: STEADY_S * 1000 };
    const child = spawn(process.execPath, [path.join(root, 'bench', 'lease-node.js'), JSON.stringify(options)], { stdio: ['pipe', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      if (out === 'ready\n') child.stdin.write('go\n');
    });
    await new Promise((resolve) => child.once('exit', resolve));
    const result = JSON.parse(out.split('\n')[1]);
    const steady = result.perSecond.slice(STEADY_S, SECONDS).reduce((a, b) => a + b, 0);
    const window = SECONDS - STEADY_S;
    const row = {
      keys: trial.keys,
      rate: trial.rate,
      plan: trial.plan.name,
      requests_per_s: Math.round(steady / window),
      asked_per_s: trial.keys * trial.rate,
      redis_calls_per_s: +(result.steadyCalls / window).toFixed(2),
      calls_per_request_pct: +((100 * result.steadyCalls) / steady).toFixed(3),
      calls_by_reason: result.steadyCallsBy,
      refused: result.refused,
    };
    rows.push(row);
    console.log(
      `${String(trial.keys).padStart(5)} keys x ${String(trial.rate).padStart(3)}/s (${trial.plan.name.padEnd(10)}): ${row.requests_per_s} req/s admitted, ` +
        `${row.redis_calls_per_s} Redis calls/s = ${row.calls_per_request_pct}% of requests (${Object.entries(row.calls_by_reason).filter(([, n]) => n > 0).map(([w, n]) => `${w} ${n}`).join(', ')}); refused ${JSON.stringify(row.refused)}`,
    );
  }
  await store.close();
} finally {
  redis.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
}
mkdirSync(path.join(root, 'bench', 'results'), { recursive: true });
const file = path.join(root, 'bench', 'results', `leases-${env.date.replace(/[:.]/g, '-')}.json`);
writeFileSync(file, `${JSON.stringify({ ...env, seconds: SECONDS, steady_from_s: STEADY_S, rows }, null, 2)}\n`);
console.log(`\nresults: ${path.relative(root, file)}`);
