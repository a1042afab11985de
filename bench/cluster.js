// `npm run bench:cluster`: the customer store shared through Redis
// (`ipr serve --store redis://...`), measured side by side with the embedded
// store on one machine, against a real redis-server started here:
//   1. per-node requests per second: the same server (one worker on core 0,
//      wrk one thread on core 1, 64 connections, 1,000 Enterprise keys,
//      interleaved rounds) with its customers in its data folder, then in
//      Redis (goal >= 0.95x); and the Redis commands the Redis node sent
//      per request at steady state (goal: well under 1%);
//   2. revocation propagation: three nodes under load, 100 keys revoked one
//      after another, each polled on every node until refused: p50 and p99
//      of the slowest node (goal p99 < 1 s);
//   3. over-admission with three nodes: a key of 10,000 a day hammered with
//      three times that, spread over the nodes (daily: never over); a key
//      of 200 a second hammered for 10 s (per second: the busiest second).
// Results go to stdout and bench/results/cluster-*.json.
//
// Environment: BENCH_ROUNDS (3), BENCH_SECONDS (10), BENCH_DATA (a data
// folder with a published snapshot, instead of building the full dataset).
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { seededAddresses } from './addresses.js';
import { benchDataDir, createKeys, startServer } from './load.js';
import { environment, median } from './report.js';
import { freePort, LOAD_CORE, needWrk, pin, requestsFile, treeCpu, wrk } from './wrk.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const CONNECTIONS = 64;
const KEYS = 1000;
const REVOCATIONS = 100;
const DAILY = 10_000;
const PER_SECOND = 200;
process.env.IPR_PLANS_CONFIG = path.join(root, 'bench', 'plans.json');

needWrk('bench:cluster');
const { RedisCustomerStore } = await import('../dist/store/redis.js');

/** redis-server on a free loopback port, no persistence, on the load generator's core. */
async function startRedis(dir) {
  const port = await freePort();
  const child = spawn('taskset', ['-c', LOAD_CORE, 'redis-server', '--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  const url = `redis://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    try {
      execFileSync('redis-cli', ['-p', String(port), 'ping'], { stdio: 'ignore' });
      break;
    } catch {
      if (i > 200) throw new Error('redis-server did not start');
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }
  const commands = () => Number(/total_commands_processed:(\d+)/.exec(execFileSync('redis-cli', ['-p', String(port), 'info', 'stats'], { encoding: 'utf8' }))[1]);
  return { url, commands, stop: () => child.kill('SIGTERM') };
}

/** A data folder whose snapshots are `dataDir`'s. */
function nodeFolder(work, name, dataDir) {
  const dir = path.join(work, name);
  mkdirSync(dir);
  symlinkSync(path.resolve(dataDir, 'snapshots'), path.join(dir, 'snapshots'));
  return dir;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });
/** POST /v1/check; resolves the status. */
function check(port, key, ip = '8.8.8.8') {
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port, path: '/v1/check', method: 'POST', agent, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('error', () => resolve(0));
    req.end(JSON.stringify({ ip }));
  });
}

const percentile = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];

const work = mkdtempSync(path.join(os.tmpdir(), 'ipr-bench-cluster-'));
const stops = [];
try {
  const env = environment();
  console.log(`cluster benchmark ${env.date}, ${env.cpu} x${env.cores}, node ${env.node}, commit ${env.commit}`);
  const dataDir = benchDataDir(work);
  const redis = await startRedis(work);
  stops.push(redis.stop);
  const shared = await RedisCustomerStore.open(redis.url);
  stops.push(() => shared.close());

  // 1. The same server over the embedded store and over Redis.
  process.stderr.write(`making ${KEYS} keys in a data folder and ${KEYS} in Redis...\n`);
  const embeddedDir = nodeFolder(work, 'embedded', dataDir);
  const embeddedKeys = createKeys(embeddedDir, KEYS);
  await shared.createAccount('bench-enterprise@example.com', 'a bench password', 'enterprise');
  const redisKeys = [];
  for (let i = 0; i < KEYS; i++) redisKeys.push((await shared.createKey('bench-enterprise@example.com', `bench ${i}`)).key);
  const addresses = seededAddresses(40_000, 20261125);
  const embedded = await startServer(embeddedDir, { workers: 1 });
  stops.push(embedded.stop);
  const onRedis = await startServer(nodeFolder(work, 'node-a', dataDir), { workers: 1, args: ['--store', redis.url] });
  stops.push(onRedis.stop);
  pin(embedded.process.pid);
  pin(onRedis.process.pid);
  const contenders = {
    embedded: { server: embedded, file: requestsFile(work, 'embedded', embeddedKeys, addresses) },
    redis: { server: onRedis, file: requestsFile(work, 'redis', redisKeys, addresses) },
  };
  const measure = async (name, seconds) => {
    const c = contenders[name];
    const cpu = treeCpu(c.server.process.pid);
    const commands = redis.commands();
    const r = await wrk(c.server.port, c.file, { seconds, connections: CONNECTIONS });
    return { ...r, cpu_us_per_request: ((treeCpu(c.server.process.pid) - cpu) * 1e6) / r.requests, redis_commands: redis.commands() - commands };
  };
  for (const name of Object.keys(contenders)) await measure(name, 3);
  const runs = { embedded: [], redis: [] };
  for (let round = 0; round < ROUNDS; round++) for (const name of Object.keys(contenders)) runs[name].push(await measure(name, SECONDS));
  const summary = Object.fromEntries(
    Object.entries(runs).map(([name, r]) => [name, { per_second: median(r.map((x) => x.per_second)), cpu_us_per_request: median(r.map((x) => x.cpu_us_per_request)), p99_us: median(r.map((x) => x.latency_us.p99)), failed: r.reduce((a, x) => a + x.failed, 0) }]),
  );
  // Steady state: a run right after another on the Redis node (in the rounds, each follows the
  // embedded node's round, long enough for every key to go idle and give its leases back).
  const steady = await measure('redis', SECONDS);
  const redisRequests = steady.requests;
  const redisCommands = steady.redis_commands;
  const redisSeconds = steady.seconds;
  const roundCommands = runs.redis.reduce((a, x) => a + x.redis_commands, 0);
  const roundRequests = runs.redis.reduce((a, x) => a + x.requests, 0);

  // 2. Revocations under load, seen by three nodes.
  process.stderr.write(`revoking ${REVOCATIONS} keys under load on three nodes...\n`);
  const nodeB = await startServer(nodeFolder(work, 'node-b', dataDir), { workers: 1, args: ['--store', redis.url] });
  stops.push(nodeB.stop);
  const nodeC = await startServer(nodeFolder(work, 'node-c', dataDir), { workers: 1, args: ['--store', redis.url] });
  stops.push(nodeC.stop);
  const nodes = [onRedis, nodeB, nodeC];
  await shared.createAccount('bench-revoked@example.com', 'a bench password', 'enterprise');
  const doomed = [];
  for (let i = 0; i < REVOCATIONS; i++) doomed.push(await shared.createKey('bench-revoked@example.com', `doomed ${i}`));
  for (const { key } of doomed) for (const node of nodes) await check(node.port, key);
  const loading = wrk(onRedis.port, contenders.redis.file, { seconds: 1000, connections: 16, pauseMs: 1 }).catch(() => null);
  const delays = [];
  for (const { key, record } of doomed) {
    const revoked = performance.now();
    await shared.revokeKey('bench-revoked@example.com', record.prefix);
    const seen = await Promise.all(
      nodes.map(async (node) => {
        while ((await check(node.port, key)) !== 401) if (performance.now() - revoked > 10_000) return Infinity;
        return performance.now() - revoked;
      }),
    );
    delays.push(Math.max(...seen));
  }
  execFileSync('pkill', ['-f', `wrk.*127.0.0.1:${onRedis.port}/`], { stdio: 'ignore' });
  await loading;
  delays.sort((a, b) => a - b);

  // 3. Over-admission with three nodes.
  process.stderr.write('over-admission at the daily and per-second limits...\n');
  await shared.createAccount('bench-daily@example.com', 'a bench password', 'bench-daily');
  const daily = (await shared.createKey('bench-daily@example.com', 'daily')).key;
  await shared.createAccount('bench-second@example.com', 'a bench password', 'bench-second');
  const perSecond = (await shared.createKey('bench-second@example.com', 'second')).key;
  let dailyServed = 0;
  let dailyOther = 0;
  let sent = 0;
  await Promise.all(
    nodes.flatMap((node) =>
      Array.from({ length: 16 }, async () => {
        while (sent < 3 * DAILY) {
          sent++;
          const status = await check(node.port, daily);
          if (status === 200) dailyServed++;
          else if (status !== 429) dailyOther++;
        }
      }),
    ),
  );
  const bySecond = new Map();
  const started = Date.now();
  await Promise.all(
    nodes.flatMap((node) =>
      Array.from({ length: 16 }, async () => {
        while (Date.now() - started < SECONDS * 1000) {
          if ((await check(node.port, perSecond)) !== 200) continue;
          const second = Math.floor(Date.now() / 1000);
          bySecond.set(second, (bySecond.get(second) ?? 0) + 1);
        }
      }),
    ),
  );
  // Whole seconds only: the first and last are partial.
  const seconds = [...bySecond.entries()].sort((a, b) => a[0] - b[0]).slice(1, -1).map(([, n]) => n);

  const ratio = summary.redis.per_second / summary.embedded.per_second;
  console.log(`\n1. one node, one worker on core 0, wrk on core ${LOAD_CORE}, ${CONNECTIONS} connections, median of ${ROUNDS} interleaved ${SECONDS} s rounds:`);
  for (const [name, s] of Object.entries(summary)) {
    console.log(`  ${name.padEnd(9)} ${Math.round(s.per_second).toLocaleString('en-US').padStart(9)} req/s  ${s.cpu_us_per_request.toFixed(1)}µs CPU/req  p99 ${(s.p99_us / 1000).toFixed(2)} ms  failed ${s.failed}`);
  }
  console.log(`  Redis store / embedded store = ${ratio.toFixed(2)} in req/s (goal >= 0.95)`);
  console.log(
    // INFO's total_commands_processed: what Redis executed, a Lua script's own calls included (a lease call is one
    // round trip and a dozen or more commands).
    `  Redis commands executed for the node at steady state (a second ${SECONDS} s run): ${redisCommands.toLocaleString('en-US')} for ${redisRequests.toLocaleString('en-US')} requests ` +
      `(${((100 * redisCommands) / redisRequests).toFixed(4)}% of requests; ${(redisCommands / redisSeconds).toFixed(1)} a second)`,
  );
  console.log(
    `  in the rounds, each after ${SECONDS} s idle (every key leased again): ${roundCommands.toLocaleString('en-US')} for ${roundRequests.toLocaleString('en-US')} requests ` +
      `(${((100 * roundCommands) / roundRequests).toFixed(3)}%)`,
  );
  console.log(`\n2. revocation seen by all three nodes, ${REVOCATIONS} revocations under load: p50 ${percentile(delays, 50).toFixed(1)} ms, p99 ${percentile(delays, 99).toFixed(1)} ms, max ${delays.at(-1).toFixed(1)} ms (goal p99 < 1,000 ms)`);
  console.log(`\n3. three nodes, 16 clients each:`);
  console.log(`  daily limit ${DAILY.toLocaleString('en-US')}: ${(3 * DAILY).toLocaleString('en-US')} requests, ${dailyServed.toLocaleString('en-US')} served (over by ${Math.max(0, dailyServed - DAILY)}; ${dailyOther} answers neither 200 nor 429)`);
  console.log(`  per second ${PER_SECOND} for ${SECONDS} s: busiest whole second ${Math.max(...seconds)}, mean ${(seconds.reduce((a, b) => a + b, 0) / seconds.length).toFixed(1)} (client-side seconds)`);

  mkdirSync(path.join(root, 'bench', 'results'), { recursive: true });
  const file = path.join(root, 'bench', 'results', `cluster-${env.date.replace(/[:.]/g, '-')}.json`);
  writeFileSync(
    file,
    JSON.stringify({ environment: env, rounds: runs, summary, ratio, redis: { steady: { commands: redisCommands, requests: redisRequests, seconds: redisSeconds }, rounds: { commands: roundCommands, requests: roundRequests } }, revocation_ms: delays, daily: { limit: DAILY, sent: 3 * DAILY, served: dailyServed, other: dailyOther }, per_second: { limit: PER_SECOND, seconds } }, null, 2),
  );
  console.log(`\nresults: ${path.relative(root, file)}`);
} finally {
  agent.destroy();
  for (const stop of stops.reverse()) await stop();
  rmSync(work, { recursive: true, force: true });
}
