// `npm run fuzz`: builds the libFuzzer targets of native/fuzz/ with clang
// (native/CMakeLists.txt, -DIPR_FUZZ=ON) and runs each for a bounded time.
//
//   FUZZ_SECONDS   seconds per target (default 60)
//   FUZZ_TARGETS   comma-separated subset of: address, snapshot
//
// Each target starts from its committed seeds (native/fuzz/corpus/<target>/,
// replayed first: the regression inputs of fixed bugs live there) and from
// what earlier local runs found (native/fuzz/build/corpus/<target>/, where new
// inputs go; not committed). The snapshot target corrupts a real snapshot built
// here from the real feeds (native/fuzz/build/seed/). A crash, a sanitizer
// report, a broken property or a hang leaves its reproducer in
// native/fuzz/build/artifacts/<target>/; rerun it with
//   IPR_FUZZ_SNAPSHOT=<seed file> native/fuzz/build/cmake/fuzz_<target> <reproducer>
// Also imported by test/fuzz-native.test.ts.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { packageFile, sharedData } from '../../bench/addresses.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const fuzzDir = path.join(root, 'native', 'fuzz');
export const buildDir = path.join(fuzzDir, 'build');
const cmakeDir = path.join(buildDir, 'cmake');
export const targets = ['address', 'snapshot'];

/** Why the fuzz targets cannot be built here (no clang or no libFuzzer runtime), or null. */
export function missingToolchain() {
  const probe = spawnSync('clang++', ['-fsanitize=fuzzer', '-x', 'c++', '-', '-o', '/dev/null'], {
    input: 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }',
    encoding: 'utf8',
  });
  if (probe.error === undefined && probe.status === 0) return null;
  return (
    'clang with libFuzzer is needed to build the fuzz targets (Debian 12: ' +
    'apt-get install clang libclang-rt-14-dev): ' +
    (probe.error?.message ?? probe.stderr.trim().split('\n').pop())
  );
}

function run(command, args) {
  const result = spawnSync('nice', ['-n', '19', command, ...args], { cwd: root, encoding: 'utf8', maxBuffer: 1 << 26 });
  if (result.status !== 0) {
    throw new Error(`${command} ${args.join(' ')} failed (${result.status ?? result.signal}):\n${result.stdout}${result.stderr}`);
  }
}

/** Configures and builds the fuzz targets (incremental); returns nothing, throws with the compiler's output. */
export function buildTargets() {
  const missing = missingToolchain();
  if (missing !== null) throw new Error(missing);
  if (!existsSync(path.join(cmakeDir, 'CMakeCache.txt'))) {
    run('cmake', [
      '-S', path.join(root, 'native'), '-B', cmakeDir, '-DIPR_FUZZ=ON', '-DCMAKE_BUILD_TYPE=RelWithDebInfo',
      '-DCMAKE_C_COMPILER=clang', '-DCMAKE_CXX_COMPILER=clang++',
    ]);
  }
  run('cmake', ['--build', cmakeDir, '--parallel', '2']);
}

// The seed of the snapshot target: every kind of table and record, from the
// real feeds, yet small enough to corrupt and reopen hundreds of times a
// second. The ASN ranges are every 200th (IPv4) and 50th (IPv6) row of the
// npm ASN data, kept in their order; there is no location table (the only
// real geolocation data is a 60 MiB database), so every location id a
// corrupt trie produces is out of bounds and caught.
function seedSources(dir) {
  const feeds = path.join(sharedData, 'feeds');
  const everyNth = (spec, n) => {
    const file = path.join(dir, path.basename(spec));
    const lines = readFileSync(packageFile(spec), 'utf8').split('\n').filter((line, i) => line !== '' && i % n === 0);
    writeFileSync(file, `${lines.join('\n')}\n`);
    return file;
  };
  const company = (name, domain) => ({ name, type: 'hosting', domain });
  return {
    sources: [
      { name: 'tor-exits', kind: 'tor', format: 'tor-csv', path: path.join(feeds, 'tor/exits.csv') },
      { name: 'vpn-ipv4', kind: 'vpn', format: 'cidr-list', path: path.join(feeds, 'vpn/ipv4.txt') },
      { name: 'vpn-ipv6', kind: 'vpn', format: 'cidr-list', path: path.join(feeds, 'vpn/ipv6.txt') },
      { name: 'vpn-asns', kind: 'vpn', format: 'asn-list', path: path.join(feeds, 'vpn/asn.txt') },
      { name: 'datacenter-asns', kind: 'hosting', format: 'asn-list', path: path.join(feeds, 'datacenter/asn.txt') },
      { name: 'icloud-relay', kind: 'relay', format: 'cidr-list', path: path.join(feeds, 'relay/icloud-private-relay.txt') },
      { name: 'proxies', kind: 'proxy', format: 'proxy-list', path: path.join(feeds, 'proxy/proxies.txt') },
      { name: 'amazon-ipv4', kind: 'hosting', format: 'cidr-list', path: path.join(feeds, 'cloud/amazon/ipv4.txt'), company: company('Amazon Web Services', 'amazon.com') },
      { name: 'amazon-ipv6', kind: 'hosting', format: 'cidr-list', path: path.join(feeds, 'cloud/amazon/ipv6.txt'), company: company('Amazon Web Services', 'amazon.com') },
      { name: 'google-ipv4', kind: 'hosting', format: 'cidr-list', path: path.join(feeds, 'cloud/google/ipv4.txt'), company: company('Google Cloud', 'google.com') },
      { name: 'asn-ipv4', kind: 'asn', format: 'asn-csv', path: everyNth('@ip-location-db/asn/asn-ipv4.csv', 200) },
      { name: 'asn-ipv6', kind: 'asn', format: 'asn-csv', path: everyNth('@ip-location-db/asn/asn-ipv6.csv', 50) },
    ],
  };
}

/** The seed snapshot file of the snapshot target, built when missing or unreadable by this build. */
export async function seedSnapshot() {
  const { buildSnapshot, openSnapshot } = await import(pathToFileURL(path.join(root, 'dist', 'index.js')).href);
  const dir = path.join(buildDir, 'seed');
  const dataDir = path.join(dir, 'data');
  try {
    const snapshot = openSnapshot(dataDir);
    const file = snapshot.info().path;
    snapshot.close();
    return file;
  } catch {
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    const sourcesFile = path.join(dir, 'seed.sources.json');
    writeFileSync(sourcesFile, JSON.stringify(seedSources(dir), null, 2));
    await buildSnapshot({ sources: sourcesFile, dataDir, keep: 0 });
    const snapshot = openSnapshot(dataDir);
    const file = snapshot.info().path;
    snapshot.close();
    return file;
  }
}

/**
 * Runs one target for `seconds` (niced); resolves to its figures and, when it
 * found something, the reproducer's path.
 * @returns {Promise<{ target: string, seconds: number, execs: number, execsPerSecond: number, corpus: number, crash: string | null, log: string }>}
 */
export function runTarget(target, seconds, snapshotFile) {
  const work = path.join(buildDir, 'corpus', target);
  const artifacts = path.join(buildDir, 'artifacts', target);
  const logFile = path.join(buildDir, 'logs', `${target}.log`);
  for (const dir of [work, artifacts, path.dirname(logFile)]) mkdirSync(dir, { recursive: true });
  const scratch = mkdtempSync(path.join(existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir(), 'ipr-fuzz-'));
  const args = [
    path.join(cmakeDir, `fuzz_${target}`),
    `-max_total_time=${seconds}`,
    '-timeout=10', // one input running 10 s is a hang: a finding
    '-print_final_stats=1',
    `-artifact_prefix=${artifacts}/`,
    work,
    path.join(fuzzDir, 'corpus', target),
  ];
  const dict = path.join(fuzzDir, `${target}.dict`);
  if (existsSync(dict)) args.splice(2, 0, `-dict=${dict}`);
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn('nice', ['-n', '19', ...args], {
      cwd: root,
      env: { ...process.env, IPR_FUZZ_SNAPSHOT: snapshotFile ?? '', IPR_FUZZ_WORKDIR: scratch },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let log = '';
    child.stdout.on('data', (chunk) => (log += chunk));
    child.stderr.on('data', (chunk) => (log += chunk));
    child.on('error', reject);
    child.on('close', (code, signal) => {
      rmSync(scratch, { recursive: true, force: true });
      writeFileSync(logFile, log);
      const stat = (name) => Number(new RegExp(`stat::${name}:\\s+(\\d+)`).exec(log)?.[1] ?? 0);
      const written = /Test unit written to (\S+)/.exec(log)?.[1] ?? null;
      const failed = code !== 0 || signal !== null;
      resolve({
        target,
        seconds: (Date.now() - started) / 1000,
        execs: stat('number_of_executed_units'),
        execsPerSecond: stat('average_exec_per_sec'),
        corpus: Number(/DONE\s+cov: \d+ ft: \d+ corp: (\d+)/.exec(log)?.[1] ?? 0),
        crash: failed ? (written ?? `(no reproducer written; exit ${code ?? signal}, log ${logFile})`) : null,
        log: log.split('\n').slice(-60).join('\n'),
      });
    });
  });
}

async function main() {
  const seconds = Number(process.env.FUZZ_SECONDS ?? 60);
  const chosen = (process.env.FUZZ_TARGETS ?? targets.join(',')).split(',').filter((t) => t !== '');
  for (const t of chosen) if (!targets.includes(t)) throw new Error(`unknown fuzz target ${t} (known: ${targets.join(', ')})`);
  buildTargets();
  const snapshotFile = chosen.includes('snapshot') ? await seedSnapshot() : undefined;
  if (snapshotFile !== undefined) console.log(`seed snapshot: ${path.relative(root, snapshotFile)} (${statSync(snapshotFile).size} bytes)`);
  let failed = false;
  for (const target of chosen) {
    console.log(`fuzz_${target}: ${seconds} s ...`);
    const r = await runTarget(target, seconds, snapshotFile);
    console.log(
      `fuzz_${target}: ${r.execs} execs in ${r.seconds.toFixed(0)} s (${r.execsPerSecond}/s), corpus ${r.corpus}: ` +
        (r.crash === null ? 'nothing found' : `FOUND ${r.crash}`),
    );
    if (r.crash !== null) {
      failed = true;
      console.log(r.log);
    }
  }
  process.exitCode = failed ? 1 : 0;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) await main();
