// `npm run bench:http`: the HTTP benchmark, servers side by side in one run
// under the same load generator (wrk) and the same seeded real addresses:
//   (a) ours: `ipr serve` POST /v1/check with auth and limits on the full
//       real-data snapshot, the requests spread over 1,000 Enterprise keys
//       (their per-second limit raised by bench/plans.json: at over 100,000
//       requests a second, 1,000 keys of 100 a second would be refused, and
//       a refusal is a cheaper answer);
//   (b) a bare uWebSockets.js app that reads the body and answers a constant
//       check result: the ceiling of this design (bench/peers/uws-constant.js);
//   (c) Fastify with the `maxmind` reader (bench/peers/fastify-maxmind.js);
//   (d) ours again, the same server, over 100,000 keys in rotation: what an
//       active key costs.
// Layout: every server runs one worker, all its threads pinned to core 0;
// wrk runs one thread pinned to core 1, so the load generator never takes
// the server's core. Rounds are interleaved and medians reported, in
// requests per second and in server CPU per answer (steadier on a shared
// machine). Then (a) at half its peak rate for latency, the idle server's
// CPU, its memory, and a check that every answered request was counted.
// Results go to stdout and bench/results/http-*.json.
//
// Needs wrk and taskset (Debian: apt-get install wrk util-linux) and two
// cores. Environment: BENCH_ROUNDS (3), BENCH_SECONDS (10),
// BENCH_CONNECTIONS (64), BENCH_DATA (a data folder with a published
// snapshot, instead of building the full dataset).
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { seededAddresses } from './addresses.js';
import { benchDataDir, createKeys, startServer } from './load.js';
import { freePort, LOAD_CORE, needWrk, pin, requestsFile, SERVER_CORE, treeCpu, wrk } from './wrk.js';
import { environment, median } from './report.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);
const KEYS = 1000;
const MANY_KEYS = 100_000;
const ADDRESSES = 40_000;
const SEED = 20261123;
// Each paced connection rests 1 ms between answer and request: at half the
// peak that is a few dozen connections. (With 5 ms it took hundreds, and
// wrk, one thread on one core, then measured mostly its own delay in
// serving them: p50 1.3 ms against 0.3 ms at the same rate.)
const PACE_MS = 1;
const IDLE_SECONDS = 10;

// Read by every `ipr` this benchmark starts (keys made, the server).
process.env.IPR_PLANS_CONFIG = path.join(root, 'bench', 'plans.json');

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

/** Resident memory of a process, and how the snapshot file is mapped in it. */
function memory(pid, snapshotName) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const rss = Number(/VmRSS:\s+([0-9]+)/.exec(status)[1]) * 1024;
  let mappings = 0;
  let snapshotRss = 0;
  let inSnapshot = false;
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) {
      inSnapshot = line.endsWith(snapshotName);
      if (inSnapshot) mappings++;
    } else if (inSnapshot && line.startsWith('Rss:')) {
      snapshotRss += Number(/([0-9]+)/.exec(line)[1]) * 1024;
    }
  }
  return { rss_bytes: rss, snapshot_mappings: mappings, snapshot_rss_bytes: snapshotRss };
}

const mib = (bytes) => `${(bytes / 2 ** 20).toFixed(0)} MiB`;
const us = (v) => `${v.toFixed(1)}µs`;

needWrk('bench:http');

const work = mkdtempSync(path.join(os.tmpdir(), 'ipr-bench-http-'));
const servers = [];
try {
  const env = environment();
  console.log(`HTTP benchmark ${env.date}, ${env.cpu} x${env.cores}, node ${env.node}, commit ${env.commit}`);

  const dataDir = benchDataDir(work);
  const snapshotName = readFileSync(path.join(dataDir, 'snapshots', 'CURRENT'), 'utf8').trim();
  const snapshotBytes = statSync(path.join(dataDir, 'snapshots', snapshotName)).size;

  // Enterprise keys made as an operator would: 1,000 for the main runs,
  // 100,000 more for the per-key cost.
  process.stderr.write(`making ${KEYS.toLocaleString('en-US')} + ${MANY_KEYS.toLocaleString('en-US')} keys...\n`);
  const keys = createKeys(dataDir, KEYS);
  const manyKeys = createKeys(dataDir, MANY_KEYS);
  const keysFile = path.join(work, 'keys.txt');
  writeFileSync(keysFile, `${keys.join('\n')}\n`);
  const addresses = seededAddresses(ADDRESSES, SEED);
  const files = { few: requestsFile(work, 'few', keys, addresses), many: requestsFile(work, 'many', manyKeys, addresses) };

  const ours = await startServer(dataDir, { workers: 1 });
  servers.push(ours);
  const ports = { bare: await freePort(), fastify: await freePort() };
  const bare = await startPeer('bare uWS', [path.join(root, 'bench', 'peers', 'uws-constant.js'), String(ports.bare), '1']);
  servers.push(bare);
  const fastify = await startPeer('Fastify', [path.join(root, 'bench', 'peers', 'fastify-maxmind.js'), String(ports.fastify), '1', keysFile]);
  servers.push(fastify);
  for (const server of [ours, bare, fastify]) pin(server.process.pid);

  const contenders = {
    ours: { port: ours.port, pid: ours.process.pid, file: files.few },
    'bare uWS': { port: ports.bare, pid: bare.process.pid, file: files.few },
    'Fastify+maxmind': { port: ports.fastify, pid: fastify.process.pid, file: files.few },
    'ours, 100k keys': { port: ours.port, pid: ours.process.pid, file: files.many },
  };
  let oursRequests = 0;
  let oursFailed = 0;
  const measure = async (name, options) => {
    const c = contenders[name];
    const cpuBefore = treeCpu(c.pid);
    const r = await wrk(c.port, c.file, options);
    const cpu = treeCpu(c.pid) - cpuBefore;
    if (c.pid === ours.process.pid) {
      oursRequests += r.requests;
      oursFailed += r.failed;
    }
    return { ...r, cpu_us_per_request: (cpu * 1e6) / r.requests };
  };
  // Warm-up: long enough for ours to have seen every one of the 100,000 keys (each key's first request reads the store).
  for (const name of Object.keys(contenders)) await measure(name, { seconds: name === 'ours, 100k keys' ? 15 : 3, connections: CONNECTIONS });
  const runs = Object.fromEntries(Object.keys(contenders).map((c) => [c, []]));
  for (let round = 0; round < ROUNDS; round++) {
    for (const name of Object.keys(contenders)) runs[name].push(await measure(name, { seconds: SECONDS, connections: CONNECTIONS }));
  }
  const summary = Object.fromEntries(
    Object.entries(runs).map(([name, r]) => [
      name,
      {
        per_second: median(r.map((x) => x.per_second)),
        cpu_us_per_request: median(r.map((x) => x.cpu_us_per_request)),
        p50_us: median(r.map((x) => x.latency_us.p50)),
        p99_us: median(r.map((x) => x.latency_us.p99)),
        failed: r.reduce((a, x) => a + x.failed, 0),
      },
    ]),
  );

  // Latency of ours at half its peak rate. wrk paces each connection (a
  // request, its answer, PACE_MS of rest), so the rate of N connections also
  // depends on the latency: a short calibration run sets N.
  const rate = summary.ours.per_second / 2;
  let pacedConnections = Math.max(2, Math.round((rate * PACE_MS) / 1000));
  const calibration = await measure('ours', { seconds: 3, connections: pacedConnections, pauseMs: PACE_MS });
  pacedConnections = Math.max(2, Math.round((pacedConnections * rate) / calibration.per_second));
  const paced = await measure('ours', { seconds: SECONDS, connections: pacedConnections, pauseMs: PACE_MS });

  // The idle server, once the last usage is flushed: what it costs with nothing to answer (timers, flushes) and 101,000 keys.
  await new Promise((resolve) => setTimeout(resolve, 3000));
  const idleBefore = treeCpu(ours.process.pid);
  await new Promise((resolve) => setTimeout(resolve, IDLE_SECONDS * 1000));
  const idleCore = (treeCpu(ours.process.pid) - idleBefore) / IDLE_SECONDS;

  const oursMemory = memory(ours.process.pid, snapshotName);
  const threads = readdirSync(`/proc/${ours.process.pid}/task`).length;

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
  for (const key of [...keys, ...manyKeys]) counted += store.usage(store.keyByDigest(keyDigest(key)).id, today);
  await store.close();

  console.log(
    `\nPOST /v1/check: each server one worker on core ${SERVER_CORE}, wrk one thread on core ${LOAD_CORE}, ${CONNECTIONS} keep-alive connections; ` +
      `median of ${ROUNDS} interleaved ${SECONDS} s rounds:`,
  );
  console.log(`  ${'server'.padEnd(18)} ${'req/s'.padStart(9)} ${'CPU/req'.padStart(9)} ${'p50'.padStart(9)} ${'p99'.padStart(9)}  failed`);
  for (const [name, s] of Object.entries(summary)) {
    console.log(
      `  ${name.padEnd(18)} ${Math.round(s.per_second).toLocaleString('en-US').padStart(9)} ${us(s.cpu_us_per_request).padStart(9)} ` +
        `${(s.p50_us / 1000).toFixed(2).padStart(7)}ms ${(s.p99_us / 1000).toFixed(2).padStart(7)}ms  ${s.failed}`,
    );
  }
  const ratio = (a, b) => ({ rate: summary[a].per_second / summary[b].per_second, cpu: summary[b].cpu_us_per_request / summary[a].cpu_us_per_request });
  const ratios = { bare: ratio('ours', 'bare uWS'), fastify: ratio('ours', 'Fastify+maxmind'), manyKeys: ratio('ours, 100k keys', 'ours') };
  console.log(`  ours / bare uWS = ${ratios.bare.rate.toFixed(2)} in req/s, ${ratios.bare.cpu.toFixed(2)} in server CPU per answer (goal >= 0.7)`);
  console.log(`  ours / Fastify+maxmind = ${ratios.fastify.rate.toFixed(1)} in req/s, ${ratios.fastify.cpu.toFixed(1)} in server CPU per answer (goal >= 3)`);
  console.log(`  100,000 keys / 1,000 keys = ${ratios.manyKeys.rate.toFixed(2)} in req/s, ${ratios.manyKeys.cpu.toFixed(2)} in server CPU per answer (goal >= 0.9)`);
  console.log(
    `\nours at half its peak (${Math.round(rate).toLocaleString('en-US')} req/s asked, ${Math.round(paced.per_second).toLocaleString('en-US')} done, ` +
      `${pacedConnections} connections paced ${PACE_MS} ms): p50 ${(paced.latency_us.p50 / 1000).toFixed(2)} ms, p99 ${(paced.latency_us.p99 / 1000).toFixed(2)} ms (goal < 2 ms), failed ${paced.failed}`,
  );
  console.log(`idle: ours used ${(idleCore * 100).toFixed(2)}% of a core over ${IDLE_SECONDS} s with ${(KEYS + MANY_KEYS).toLocaleString('en-US')} keys (goal < 1%)`);
  console.log(
    `memory: ours (1 worker, ${threads} threads) RSS ${mib(oursMemory.rss_bytes)}, snapshot ${mib(snapshotBytes)} mapped ${oursMemory.snapshot_mappings} time(s), ` +
      `${mib(oursMemory.snapshot_rss_bytes)} of it resident`,
  );
  console.log(`counted: ${counted.toLocaleString('en-US')} requests on ${(KEYS + MANY_KEYS).toLocaleString('en-US')} keys; wrk recorded ${oursRequests.toLocaleString('en-US')} answers, ${oursFailed} failed (non-2xx or socket errors)`);

  mkdirSync(path.join(root, 'bench', 'results'), { recursive: true });
  const file = path.join(root, 'bench', 'results', `http-${env.date.replace(/[:.]/g, '-')}.json`);
  writeFileSync(
    file,
    JSON.stringify(
      { environment: env, connections: CONNECTIONS, seconds: SECONDS, rounds: runs, summary, ratios, paced, idle_core: idleCore, memory: { ours: oursMemory, snapshot_bytes: snapshotBytes }, counted, recorded: oursRequests, failed: oursFailed },
      null,
      2,
    ),
  );
  console.log(`\nresults: ${path.relative(root, file)}`);
} finally {
  await Promise.all(servers.map((server) => server.stop()));
  rmSync(work, { recursive: true, force: true });
}
