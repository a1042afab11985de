// `npm run bench`: the engine benchmark, side by side in one run.
//   1. build: the full dataset (sources/feeds.sources.json: every real feed,
//      the ASN ranges and DB-IP City Lite IPv4+IPv6): seconds, peak RSS, size;
//   2. lookups from JS on the same seeded addresses: our lookup() and
//      lookupMany() against mmdb-lib's city lookup (what `maxmind` uses),
//      each trial in its own process, rounds interleaved, median reported;
//   3. the native bench (C++, no Node): lookups per second per core.
// Results go to stdout and bench/results/engine-<time>.json.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { seededAddresses } from './addresses.js';
import { environment, median } from './report.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const ADDRESSES = Number(process.env.BENCH_ADDRESSES ?? 200_000);
const SEED = 20261122;

function node(script, args) {
  return JSON.parse(execFileSync(process.execPath, [path.join(root, 'bench', script), ...args], { encoding: 'utf8', maxBuffer: 1 << 26 }));
}

const work = mkdtempSync(path.join(os.tmpdir(), 'ipr-bench-'));
try {
  const env = environment();
  console.log(`engine benchmark ${env.date}, ${env.cpu} x${env.cores}, node ${env.node}, commit ${env.commit}`);

  const dataDir = path.join(work, 'data');
  const build = node('build-trial.js', [path.join(root, 'sources', 'feeds.sources.json'), dataDir]);
  console.log(
    `\nbuild (full dataset): ${build.seconds.toFixed(1)} s, peak RSS ${(build.peak_rss_bytes / 2 ** 20).toFixed(0)} MiB, ` +
      `snapshot ${(build.snapshot_bytes / 2 ** 20).toFixed(1)} MiB (goal: <= 60 s, <= 2048 MiB)`,
  );

  const addresses = seededAddresses(ADDRESSES, SEED);
  const addressesFile = path.join(work, 'addresses.json');
  writeFileSync(addressesFile, JSON.stringify(addresses));
  writeFileSync(path.join(work, 'addresses.txt'), `${addresses.join('\n')}\n`);
  const contenders = ['lookup', 'lookupMany', 'mmdb-lib'];
  const rates = Object.fromEntries(contenders.map((c) => [c, []]));
  for (let round = 0; round < ROUNDS; round++) {
    for (const c of contenders) rates[c].push(node('lookup-trial.js', [c, addressesFile, dataDir]).per_second);
  }
  const lookups = Object.fromEntries(contenders.map((c) => [c, median(rates[c])]));
  console.log(`\nlookups from JS, ${ADDRESSES.toLocaleString('en-US')} seeded addresses, median of ${ROUNDS} interleaved rounds, one core:`);
  for (const c of contenders) {
    console.log(`  ${c.padEnd(12)} ${(lookups[c] / 1e6).toFixed(3).padStart(7)} M/s  ${(lookups[c] / lookups['mmdb-lib']).toFixed(1).padStart(5)}x mmdb-lib`);
  }
  console.log('  (goal: lookup and lookupMany >= 5x mmdb-lib)');

  const tools = path.join(work, 'native-tools');
  execFileSync('cmake', ['-S', path.join(root, 'native'), '-B', tools, '-DIPR_NATIVE_TOOLS=ON', '-DCMAKE_BUILD_TYPE=Release'], { stdio: 'ignore' });
  execFileSync('cmake', ['--build', tools, '--target', 'lookup_bench'], { stdio: 'ignore' });
  const snapshotFile = path.join(dataDir, 'snapshots', readFileSync(path.join(dataDir, 'snapshots', 'CURRENT'), 'utf8').trim());
  const nativeRuns = execFileSync(path.join(tools, 'lookup_bench'), [snapshotFile, path.join(work, 'addresses.txt')], { encoding: 'utf8' })
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  console.log('\nnative lookups (C++, every table, the same addresses repeated 10 times, one core):');
  for (const r of nativeRuns) {
    console.log(`  ${r.mode.padEnd(9)} ${r.family}  ${(r.per_second / 1e6).toFixed(1).padStart(6)} M/s  ${r.ns_per_lookup.toFixed(1).padStart(6)} ns`);
  }
  console.log('  (goal: >= 20 M/s per core)');

  mkdirSync(path.join(root, 'bench', 'results'), { recursive: true });
  const file = path.join(root, 'bench', 'results', `engine-${env.date.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify({ environment: env, build, lookups: { rounds: rates, median: lookups }, native: nativeRuns }, null, 2));
  console.log(`\nresults: ${path.relative(root, file)}`);
} finally {
  rmSync(work, { recursive: true, force: true });
}
