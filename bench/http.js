// `npm run bench:http`: the HTTP benchmark, three servers side by side in one
// run, under the same load generator (wrk) and the same seeded real addresses:
//   (a) ours: `ipr serve` POST /v1/check with auth and limits, on the full
//       real-data snapshot, the requests spread over 2,000 Enterprise keys;
//   (b) a bare uWebSockets.js app that reads the body and answers a constant
//       check result: the ceiling of this design (bench/peers/uws-constant.js);
//   (c) Fastify with the `maxmind` reader (bench/peers/fastify-maxmind.js).
// Each server runs on both cores (2 worker threads, or 2 cluster processes);
// rounds are interleaved and the median is reported. Then (a) at half its
// peak rate for latency, its memory, and a check that every request was
// counted against its key. Results go to stdout and bench/results/http-*.json.
//
// Needs wrk (Debian: apt-get install wrk). Environment: BENCH_ROUNDS (3),
// BENCH_SECONDS (10), BENCH_CONNECTIONS (64), BENCH_DATA (a data folder with a
// published snapshot, instead of building the full dataset).
import { execFile, execFileSync, spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { seededAddresses } from './addresses.js';
import { cpuSeconds, createKeys, startServer } from './load.js';
import { environment, median } from './report.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);
const WORKERS = 2;
const KEYS = 2000;
const REQUESTS = 40_000;
const SEED = 20261123;
const PACE_MS = 5;

const run = promisify(execFile);

function freePort() {
  return new Promise((resolve, reject) => {
    const probe = net.createServer().once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

/** Starts a peer server process; resolves once it says it is listening. */
function startPeer(name, args) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const timer = setTimeout(() => reject(new Error(`${name} did not start:\n${output}`)), 60_000);
    const onData = (d) => {
      output += d;
      if (/listening/.test(output)) {
        clearTimeout(timer);
        resolve({
          process: child,
          stop: () => new Promise((done) => (child.exitCode !== null ? done(child.exitCode) : (child.once('exit', done), child.kill('SIGTERM')))),
        });
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited with ${code}:\n${output}`));
    });
  });
}

async function wrk(port, requestsFile, { seconds, connections, pauseMs = 0 }) {
  const args = ['-t', '2', '-c', String(connections), '-d', `${seconds}s`, '--timeout', '5s', '-s', path.join(root, 'bench', 'wrk-check.lua')];
  args.push(`http://127.0.0.1:${port}/v1/check`, '--', requestsFile, String(pauseMs));
  const { stdout } = await run('wrk', args, { maxBuffer: 1 << 20 });
  const line = stdout.split('\n').find((l) => l.startsWith('{"requests"'));
  if (!line) throw new Error(`wrk printed no summary:\n${stdout}`);
  const r = JSON.parse(line);
  const errors = Object.values(r.errors).reduce((a, b) => a + b, 0);
  return { ...r, failed: errors, per_second: r.requests / r.seconds };
}

/** Resident memory of a process, and how the snapshot file is mapped in it. */
function memory(pid, snapshotName) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const rss = Number(/VmRSS:\s+([0-9]+)/.exec(status)[1]) * 1024;
  const smaps = readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n');
  let mappings = 0;
  let snapshotRss = 0;
  let inSnapshot = false;
  for (const line of smaps) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) {
      inSnapshot = line.endsWith(snapshotName);
      if (inSnapshot) mappings++;
    } else if (inSnapshot && line.startsWith('Rss:')) {
      snapshotRss += Number(/([0-9]+)/.exec(line)[1]) * 1024;
    }
  }
  return { rss_bytes: rss, snapshot_mappings: mappings, snapshot_rss_bytes: snapshotRss };
}

/** A process and its children (the cluster peer's workers). */
function tree(pid) {
  const children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
  return [pid, ...children.map(Number)];
}

const treeRss = (pid) => tree(pid).reduce((sum, p) => sum + memory(p, '\0').rss_bytes, 0);
const treeCpu = (pid) => tree(pid).reduce((sum, p) => sum + cpuSeconds(p), 0);

const mib = (bytes) => `${(bytes / 2 ** 20).toFixed(0)} MiB`;

try {
  execFileSync('wrk', ['--version'], { stdio: 'ignore' });
} catch (error) {
  if (error.code === 'ENOENT') {
    console.error('bench:http needs wrk: apt-get install wrk');
    process.exit(1);
  }
}

const work = mkdtempSync(path.join(os.tmpdir(), 'ipr-bench-http-'));
const servers = [];
try {
  const env = environment();
  console.log(`HTTP benchmark ${env.date}, ${env.cpu} x${env.cores}, node ${env.node}, commit ${env.commit}`);

  let dataDir = process.env.BENCH_DATA;
  if (dataDir === undefined) {
    dataDir = path.join(work, 'data');
    process.stderr.write('building the full dataset (sources/feeds.sources.json)...\n');
    execFileSync(process.execPath, [path.join(root, 'bench', 'build-trial.js'), path.join(root, 'sources', 'feeds.sources.json'), dataDir], { stdio: 'ignore' });
  }
  const snapshotName = readFileSync(path.join(dataDir, 'snapshots', 'CURRENT'), 'utf8').trim();
  const snapshotBytes = statSync(path.join(dataDir, 'snapshots', snapshotName)).size;

  // 2,000 Enterprise keys of one account, made as an operator would.
  const keys = createKeys(dataDir, KEYS);
  const keysFile = path.join(work, 'keys.txt');
  writeFileSync(keysFile, `${keys.join('\n')}\n`);
  const addresses = seededAddresses(REQUESTS, SEED);
  const requestsFile = path.join(work, 'requests.tsv');
  writeFileSync(requestsFile, addresses.map((ip, i) => `${keys[i % KEYS]}\t${ip}\n`).join(''));

  const ours = await startServer(dataDir, { workers: WORKERS });
  servers.push(ours);
  const ports = { ours: ours.port, 'bare uWS': await freePort(), 'Fastify+maxmind': await freePort() };
  const bare = await startPeer('bare uWS', [path.join(root, 'bench', 'peers', 'uws-constant.js'), String(ports['bare uWS']), String(WORKERS)]);
  servers.push(bare);
  const fastify = await startPeer('Fastify', [path.join(root, 'bench', 'peers', 'fastify-maxmind.js'), String(ports['Fastify+maxmind']), String(WORKERS), keysFile]);
  servers.push(fastify);

  const contenders = Object.keys(ports);
  let oursRequests = 0;
  let oursFailed = 0;
  const count = (name, r) => {
    if (name === 'ours') {
      oursRequests += r.requests;
      oursFailed += r.failed;
    }
    return r;
  };
  for (const name of contenders) count(name, await wrk(ports[name], requestsFile, { seconds: 3, connections: CONNECTIONS })); // warm-up
  const runs = Object.fromEntries(contenders.map((c) => [c, []]));
  // Requests per second move with whatever else the shared cores do; the
  // server CPU each answer cost is steadier, and its ratio is the ratio of
  // what each server could answer on the same cores.
  const pids = { ours: ours.process.pid, 'bare uWS': bare.process.pid, 'Fastify+maxmind': fastify.process.pid };
  for (let round = 0; round < ROUNDS; round++) {
    for (const name of contenders) {
      const cpuBefore = treeCpu(pids[name]);
      const r = count(name, await wrk(ports[name], requestsFile, { seconds: SECONDS, connections: CONNECTIONS }));
      runs[name].push({ ...r, cpu_us_per_request: ((treeCpu(pids[name]) - cpuBefore) * 1e6) / r.requests });
    }
  }
  const summary = Object.fromEntries(
    contenders.map((name) => {
      const r = runs[name];
      return [
        name,
        {
          per_second: median(r.map((x) => x.per_second)),
          cpu_us_per_request: median(r.map((x) => x.cpu_us_per_request)),
          p50_us: median(r.map((x) => x.latency_us.p50)),
          p99_us: median(r.map((x) => x.latency_us.p99)),
          failed: r.reduce((a, x) => a + x.failed, 0),
        },
      ];
    }),
  );

  // Latency of ours at half its peak rate. wrk paces each connection (a
  // request, its answer, PACE_MS of rest), so the rate of N connections also
  // depends on the latency: a short calibration run sets N.
  const rate = summary.ours.per_second / 2;
  let pacedConnections = Math.max(2, Math.round((rate * PACE_MS) / 1000));
  const calibration = count('ours', await wrk(ports.ours, requestsFile, { seconds: 3, connections: pacedConnections, pauseMs: PACE_MS }));
  pacedConnections = Math.max(2, Math.round((pacedConnections * rate) / calibration.per_second));
  const paced = count('ours', await wrk(ports.ours, requestsFile, { seconds: SECONDS, connections: pacedConnections, pauseMs: PACE_MS }));

  const oursMemory = memory(ours.process.pid, snapshotName);
  const fastifyRss = treeRss(fastify.process.pid);

  // Every request ours answered was counted against its key (the server
  // flushes usage every second and on SIGTERM). wrk stops with requests in
  // flight that the server answered and counted but wrk did not record: at
  // most one per connection per run.
  await ours.stop();
  servers.splice(servers.indexOf(ours), 1);
  const { AccountStore, dayOf, keyDigest } = await import('../dist/store/accounts.js');
  const store = new AccountStore(dataDir);
  const today = dayOf(Date.now());
  let counted = 0;
  for (const key of keys) counted += store.usage(store.keyByDigest(keyDigest(key)).id, today);
  await store.close();

  console.log(`\nPOST /v1/check, ${CONNECTIONS} keep-alive connections, wrk -t2, ${WORKERS} server workers, median of ${ROUNDS} interleaved ${SECONDS} s rounds:`);
  console.log(`  ${'server'.padEnd(16)} ${'req/s'.padStart(9)} ${'CPU/req'.padStart(9)} ${'p50'.padStart(9)} ${'p99'.padStart(9)}  failed`);
  for (const name of contenders) {
    const s = summary[name];
    console.log(
      `  ${name.padEnd(16)} ${Math.round(s.per_second).toLocaleString('en-US').padStart(9)} ${s.cpu_us_per_request.toFixed(1).padStart(7)}µs ` +
        `${(s.p50_us / 1000).toFixed(2).padStart(7)}ms ${(s.p99_us / 1000).toFixed(2).padStart(7)}ms  ${s.failed}`,
    );
  }
  const ratioBare = summary.ours.per_second / summary['bare uWS'].per_second;
  const ratioFastify = summary.ours.per_second / summary['Fastify+maxmind'].per_second;
  const cpuRatioBare = summary['bare uWS'].cpu_us_per_request / summary.ours.cpu_us_per_request;
  const cpuRatioFastify = summary['Fastify+maxmind'].cpu_us_per_request / summary.ours.cpu_us_per_request;
  console.log(`  ours / bare uWS = ${ratioBare.toFixed(2)} in req/s, ${cpuRatioBare.toFixed(2)} in server CPU per request (goal >= 0.7)`);
  console.log(`  ours / Fastify+maxmind = ${ratioFastify.toFixed(1)} in req/s, ${cpuRatioFastify.toFixed(1)} in server CPU per request (goal >= 3)`);
  console.log(
    `\nours at half its peak (${Math.round(rate).toLocaleString('en-US')} req/s asked, ${Math.round(paced.per_second).toLocaleString('en-US')} done, ` +
      `${pacedConnections} connections paced ${PACE_MS} ms): p50 ${(paced.latency_us.p50 / 1000).toFixed(2)} ms, p99 ${(paced.latency_us.p99 / 1000).toFixed(2)} ms (goal < 2 ms), failed ${paced.failed}`,
  );
  console.log(
    `\nmemory: ours (${WORKERS} workers) RSS ${mib(oursMemory.rss_bytes)}, snapshot ${mib(snapshotBytes)} mapped ${oursMemory.snapshot_mappings} time(s), ` +
      `${mib(oursMemory.snapshot_rss_bytes)} of it resident; Fastify+maxmind (${WORKERS} processes) RSS ${mib(fastifyRss)}`,
  );
  console.log(`counted: ${counted.toLocaleString('en-US')} requests on ${KEYS} keys; wrk recorded ${oursRequests.toLocaleString('en-US')} answers, ${oursFailed} failed (non-2xx or socket errors)`);

  mkdirSync(path.join(root, 'bench', 'results'), { recursive: true });
  const file = path.join(root, 'bench', 'results', `http-${env.date.replace(/[:.]/g, '-')}.json`);
  writeFileSync(
    file,
    JSON.stringify(
      { environment: env, connections: CONNECTIONS, seconds: SECONDS, rounds: runs, summary, ratios: { bare: ratioBare, fastify: ratioFastify, bare_cpu: cpuRatioBare, fastify_cpu: cpuRatioFastify }, paced, memory: { ours: oursMemory, fastify_rss_bytes: fastifyRss, snapshot_bytes: snapshotBytes }, counted, recorded: oursRequests, failed: oursFailed },
      null,
      2,
    ),
  );
  console.log(`\nresults: ${path.relative(root, file)}`);
} finally {
  await Promise.all(servers.map((server) => server.stop()));
  rmSync(work, { recursive: true, force: true });
}
