// `npm run bench:update`: live updates of the full dataset against a 2-worker
// server.
//   1. update to swap, no load: the time from `ipr update` starting to every
//      worker answering from the new snapshot (a changed Tor feed), split into
//      the update itself and publication -> all workers; 3 rounds;
//   2. swaps under load: autocannon over many enterprise keys while prebuilt
//      snapshots are published every 5 s: requests in the second before,
//      during and after each publication, against the seconds away from them;
//   3. a full update under the same load: requests per second before, while
//      the update process builds (at a lower priority), and around its
//      publication, and the time to all workers answering from it.
// The upstream feeds cannot be reached from this machine: the feeds of
// sources/feeds.sources.json (../shared/data/feeds) are served by a local
// HTTP server and fetched over HTTP as the default configuration fetches the
// upstreams; ASN and DB-IP data come from npm packages in both.
// "Every worker" is checked with 16 keep-alive connections, each asking a
// probe address; the kernel spreads connections over the workers' sockets,
// so all 16 landing on one worker has odds of 2^-15.
// Results go to stdout and bench/results/update-<time>.json.
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { seededAddresses, sharedData } from './addresses.js';
import { servedSources, startFeedServer } from './feed-server.js';
import { cli, createKeys, runLoad, startServer } from './load.js';
import { environment, median } from './report.js';
import { publish } from '../dist/pipeline/publish.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);
const KEYS = 1000;
const PROBES = 16;
/** In tor/exits.csv; the changed feed leaves it out. */
const PROBE_IP = '204.8.96.141';

function runUpdate(sourcesFile, dataDir) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [cli, 'update', '--sources', sourcesFile, '--data', dataDir, '--json'], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.once('close', (code) => (code === 0 ? resolve(JSON.parse(stdout.trim().split('\n').pop())) : reject(new Error(`ipr update: ${stderr}`))));
  });
}

/** 16 keep-alive connections, each with its own key, asking whether PROBE_IP is a Tor exit. */
function probes(port, keys) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: PROBES });
  const ask = (key) =>
    new Promise((resolve, reject) => {
      const body = JSON.stringify({ ip: PROBE_IP });
      const req = http.request(
        { host: '127.0.0.1', port, path: '/v1/check', method: 'POST', agent, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': body.length } },
        (res) => {
          let text = '';
          res.on('data', (d) => (text += d));
          res.on('end', () => (res.statusCode === 200 ? resolve(JSON.parse(text).is_tor) : reject(new Error(`probe: ${res.statusCode} ${text}`))));
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  return {
    /** Resolves when all 16 answer `isTor`, with the time it happened. */
    async until(isTor, timeoutMs = 600_000) {
      const started = Date.now();
      while (Date.now() - started < timeoutMs) {
        const answers = await Promise.all(keys.map(ask));
        if (answers.every((a) => a === isTor)) return Date.now();
        await sleep(25);
      }
      throw new Error('the workers did not all move to the new snapshot');
    },
    close: () => agent.destroy(),
  };
}

/** When CURRENT was last replaced: the publication. */
function publishedAt(dataDir) {
  return statSync(path.join(dataDir, 'snapshots', 'CURRENT')).mtimeMs;
}

function currentSnapshot(dataDir) {
  return path.join(dataDir, 'snapshots', readFileSync(path.join(dataDir, 'snapshots', 'CURRENT'), 'utf8').trim());
}

/** The tick (a second of load, ending at `at`) in which `time` falls. */
function tickAt(seconds, time) {
  return seconds.findIndex((s) => time > s.at - 1000 && time <= s.at);
}

const work = mkdtempSync(path.join(os.tmpdir(), 'ipr-bench-update-'));
const feeds = await startFeedServer();
let server = null;
try {
  const env = environment();
  console.log(`update benchmark ${env.date}, ${env.cpu} x${env.cores}, node ${env.node}, commit ${env.commit}`);
  console.log('(feeds served from a local HTTP server: the upstreams are unreachable here)');

  const config = servedSources(path.join(root, 'sources', 'feeds.sources.json'), feeds);
  const exits = path.join(sharedData, 'feeds', 'tor', 'exits.csv');
  const changed = path.join(work, 'exits-changed.csv');
  writeFileSync(changed, readFileSync(exits, 'utf8').split('\n').filter((l) => !l.includes(`, ${PROBE_IP},`)).join('\n'));
  const sourcesFile = path.join(work, 'sources.json');
  writeFileSync(sourcesFile, JSON.stringify(config));
  const dataDir = path.join(work, 'data');
  const setTor = (isTor) => feeds.route('/tor-exits', { file: isTor ? exits : changed });

  setTor(true);
  let started = Date.now();
  const first = await runUpdate(sourcesFile, dataDir);
  const firstSeconds = (Date.now() - started) / 1000;
  console.log(`\nfirst update, full dataset over HTTP: ${firstSeconds.toFixed(1)} s (${first.sources.length} sources)`);

  const keys = createKeys(dataDir, KEYS);
  server = await startServer(dataDir, { workers: 2 });
  const probe = probes(server.port, keys.slice(0, PROBES));
  const loadKeys = keys.slice(PROBES);
  const addresses = seededAddresses(20_000, 20261123);

  // 1. Update to swap, no load.
  let isTor = true;
  const rounds = [];
  for (let round = 0; round < ROUNDS; round++) {
    isTor = !isTor;
    setTor(isTor);
    started = Date.now();
    const [report, allNew] = await Promise.all([runUpdate(sourcesFile, dataDir), probe.until(isTor)]);
    const published = publishedAt(dataDir);
    const round_ = { total_s: (allNew - started) / 1000, update_s: report.seconds, publication_to_all_workers_ms: Math.round(allNew - published) };
    rounds.push(round_);
    console.log(
      `  round ${round + 1}: update start -> all workers new ${round_.total_s.toFixed(1)} s ` +
        `(ipr update ${round_.update_s.toFixed(1)} s; publication -> all workers ${round_.publication_to_all_workers_ms} ms)`,
    );
  }
  const unloaded = {
    total_s: median(rounds.map((r) => r.total_s)),
    update_s: median(rounds.map((r) => r.update_s)),
    publication_to_all_workers_ms: median(rounds.map((r) => r.publication_to_all_workers_ms)),
  };
  console.log(
    `update start -> all workers answer from the new snapshot, no load, median of ${ROUNDS}: ${unloaded.total_s.toFixed(1)} s ` +
      `(of which publication -> all workers ${unloaded.publication_to_all_workers_ms} ms)`,
  );

  // 2. Swaps under load: the two newest snapshots, published in turn every 5 s.
  const a = currentSnapshot(dataDir);
  isTor = !isTor;
  setTor(isTor);
  await runUpdate(sourcesFile, dataDir);
  await probe.until(isTor);
  const b = currentSnapshot(dataDir);
  const swapTimes = [];
  const swapping = (async () => {
    for (let i = 0; i < 5; i++) {
      await sleep(5000);
      publish(dataDir, i % 2 === 0 ? a : b);
      swapTimes.push(Date.now());
    }
  })();
  const swapLoad = await runLoad({ port: server.port, keys: loadKeys, addresses, connections: CONNECTIONS, duration: 30 });
  await swapping;
  publish(dataDir, b); // the newest again: the update below then has a change to publish
  const near = new Set();
  const swaps = swapTimes.map((time) => {
    const i = tickAt(swapLoad.seconds, time);
    for (let j = i - 1; j <= i + 1; j++) near.add(j);
    return { before: swapLoad.seconds[i - 1]?.requests, during: swapLoad.seconds[i]?.requests, after: swapLoad.seconds[i + 1]?.requests };
  });
  // The first and last seconds are partial: left out.
  const away = swapLoad.seconds.filter((_, i) => i > 0 && i < swapLoad.seconds.length - 1 && !near.has(i)).map((s) => s.requests);
  const swapSummary = {
    connections: CONNECTIONS,
    keys: loadKeys.length,
    statuses: swapLoad.statuses,
    errors: swapLoad.errors,
    away: { median: median(away), min: Math.min(...away), max: Math.max(...away) },
    swaps,
    latency_ms: swapLoad.latencyMs,
  };
  console.log(`\nswaps under load (${CONNECTIONS} connections, ${loadKeys.length} enterprise keys, 30 s, a publication every 5 s):`);
  console.log(`  statuses ${JSON.stringify(swapLoad.statuses)}, errors ${swapLoad.errors}, latency p50 ${swapLoad.latencyMs.p50} ms, p99 ${swapLoad.latencyMs.p99} ms`);
  console.log(`  requests/s away from publications: median ${swapSummary.away.median}, range ${swapSummary.away.min}-${swapSummary.away.max}`);
  for (const [i, s] of swaps.entries()) console.log(`  publication ${i + 1}: before ${s.before}, during ${s.during}, after ${s.after}`);

  // 3. A full update under the same load.
  isTor = !isTor;
  setTor(isTor);
  const duration = Math.ceil(unloaded.total_s * 3 + 20);
  let updateStart = 0;
  const updating = (async () => {
    await sleep(5000);
    updateStart = Date.now();
    const report = await runUpdate(sourcesFile, dataDir);
    const allNew = await probe.until(isTor);
    return { report, allNew, published: publishedAt(dataDir), ended: Date.now() };
  })();
  const updateLoad = await runLoad({ port: server.port, keys: loadKeys, addresses, connections: CONNECTIONS, duration });
  const updated = await updating;
  const pub = tickAt(updateLoad.seconds, updated.published);
  const start = tickAt(updateLoad.seconds, updateStart);
  const rates = (from, to) => updateLoad.seconds.slice(Math.max(1, from), to).map((s) => s.requests);
  const updateSummary = {
    duration_s: duration,
    statuses: updateLoad.statuses,
    errors: updateLoad.errors,
    update_start_to_all_workers_s: (updated.allNew - updateStart) / 1000,
    update_s: updated.report.seconds,
    before_update: median(rates(1, start)),
    while_building: median(rates(start + 1, pub - 1)),
    publication: { before: updateLoad.seconds[pub - 1]?.requests, during: updateLoad.seconds[pub]?.requests, after: updateLoad.seconds[pub + 1]?.requests },
    after_update: median(rates(pub + 2, updateLoad.seconds.length - 1)),
    latency_ms: updateLoad.latencyMs,
  };
  console.log(`\na full update under the same load (${duration} s):`);
  console.log(`  statuses ${JSON.stringify(updateLoad.statuses)}, errors ${updateLoad.errors}`);
  console.log(
    `  update start -> all workers new ${updateSummary.update_start_to_all_workers_s.toFixed(1)} s (ipr update ${updateSummary.update_s.toFixed(1)} s at nice 10)`,
  );
  console.log(
    `  requests/s: before the update ${updateSummary.before_update}, while it builds ${updateSummary.while_building}, ` +
      `publication before/during/after ${updateSummary.publication.before}/${updateSummary.publication.during}/${updateSummary.publication.after}, ` +
      `after ${updateSummary.after_update}`,
  );
  probe.close();

  mkdirSync(path.join(root, 'bench', 'results'), { recursive: true });
  const file = path.join(root, 'bench', 'results', `update-${env.date.replace(/[:.]/g, '-')}.json`);
  writeFileSync(
    file,
    JSON.stringify({ environment: env, first_update_s: firstSeconds, unloaded: { rounds, median: unloaded }, swaps_under_load: swapSummary, update_under_load: { ...updateSummary, seconds: updateLoad.seconds } }, null, 2),
  );
  console.log(`\nresults: ${path.relative(root, file)}`);
} finally {
  await server?.stop();
  await feeds.close();
  rmSync(work, { recursive: true, force: true });
}
