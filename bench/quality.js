// `npm run bench:quality`: detection quality on independent evaluation sets.
//
//   node bench/quality.js [--sources FILE] [--data DIR] [--eval DIR]
//
// Builds a snapshot from the sources configuration (default
// sources/feeds.sources.json) in a process of its own, or reuses the one
// published in --data DIR (built by `ipr build --data DIR` or an earlier
// run), then looks up every address of every set listed in the evaluation
// folder's manifest.json (default ../shared/data/eval: the development half;
// point --eval at another folder of the same shape for the sets kept apart).
// For each set: the share flagged as the set expects (`expect`: is_vpn,
// is_tor, ...) and the share with any flag; for the negative sets (expect
// null: consumer ISP space), the share with any flag is the false-positive
// rate. Pooled per category: hits over addresses of every set of that
// category. Residential addresses that are flagged are counted per source
// listing them (from the evidence, Snapshot.explain): what the precision
// rules of src/pipeline/trust.ts are tuned on. The evaluation addresses are only read here: never copy them into a
// feed, a fixture or the repository.
//
// Results go to stdout and bench/results/quality-<time>.json.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { openSnapshot } from '../dist/index.js';
import { sharedData } from './addresses.js';
import { environment } from './report.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const { values: options } = parseArgs({
  options: {
    sources: { type: 'string', default: path.join(root, 'sources', 'feeds.sources.json') },
    data: { type: 'string' },
    eval: { type: 'string', default: path.join(sharedData, 'eval') },
  },
});

const FLAGS = ['is_vpn', 'is_proxy', 'is_tor', 'is_relay', 'is_hosting'];
/** The goals of issue 11, pooled per category (residential: the most flagged). */
const GOALS = { vpn: 0.75, proxy: 0.6, hosting: 0.9, tor: 0.76, residential: 0.005 };

function addresses(file) {
  return readFileSync(file, 'utf8')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
}

/** A share in percent; with two decimals where shares are small (false positives). */
function percent(part, whole, digits = 1) {
  return whole === 0 ? '-' : `${((100 * part) / whole).toFixed(digits)}%`;
}

const work = mkdtempSync(path.join(os.tmpdir(), 'ipr-quality-'));
try {
  const env = environment();
  console.log(`detection quality ${env.date}, node ${env.node}, commit ${env.commit}`);
  let dataDir = options.data;
  let build = null;
  if (dataDir === undefined || !existsSync(path.join(dataDir, 'snapshots', 'CURRENT'))) {
    dataDir ??= path.join(work, 'data');
    build = JSON.parse(
      execFileSync(process.execPath, [path.join(root, 'bench', 'build-trial.js'), options.sources, dataDir], {
        encoding: 'utf8',
        maxBuffer: 1 << 26,
      }),
    );
    console.log(
      `built from ${path.relative(root, options.sources)}: ${build.seconds.toFixed(1)} s, ` +
        `peak RSS ${(build.peak_rss_bytes / 2 ** 20).toFixed(0)} MiB, snapshot ${(build.snapshot_bytes / 2 ** 20).toFixed(1)} MiB`,
    );
  } else {
    console.log(`reusing the snapshot published in ${dataDir}`);
  }
  const snapshot = openSnapshot(dataDir);
  const manifest = JSON.parse(readFileSync(path.join(options.eval, 'manifest.json'), 'utf8'));
  console.log(`evaluation sets: ${options.eval} (${manifest.split ?? 'unnamed split'})\n`);

  const sets = [];
  /** Source name -> residential addresses it flags (from the evidence). */
  const residentialBySource = new Map();
  for (const set of manifest.sets) {
    const category = set.expect === null ? 'residential' : set.expect.replace(/^is_/, '');
    const ips = addresses(path.join(options.eval, set.file));
    let expected = 0;
    let any = 0;
    for (const ip of ips) {
      const r = snapshot.lookup(ip);
      if (set.expect !== null && r[set.expect]) expected++;
      if (FLAGS.some((f) => r[f])) {
        any++;
        if (set.expect === null) {
          for (const name of new Set(snapshot.explain(ip).evidence.map((e) => e.source))) {
            residentialBySource.set(name, (residentialBySource.get(name) ?? 0) + 1);
          }
        }
      }
    }
    sets.push({ id: set.id, category, expect: set.expect, addresses: ips.length, expected, any });
  }
  snapshot.close();

  console.log(`${'set'.padEnd(22)} ${'expect'.padEnd(10)} ${'addresses'.padStart(9)} ${'as expected'.padStart(12)} ${'any flag'.padStart(9)}`);
  for (const s of sets) {
    console.log(
      `${s.id.padEnd(22)} ${(s.expect ?? '(none)').padEnd(10)} ${String(s.addresses).padStart(9)} ` +
        `${(s.expect === null ? '' : percent(s.expected, s.addresses)).padStart(12)} ${percent(s.any, s.addresses, s.expect === null ? 2 : 1).padStart(9)}`,
    );
  }

  const pooled = {};
  for (const s of sets) {
    const p = (pooled[s.category] ??= { sets: 0, addresses: 0, expected: 0, any: 0 });
    p.sets++;
    p.addresses += s.addresses;
    p.expected += s.expected;
    p.any += s.any;
  }
  console.log(`\npooled per category (goal in brackets):`);
  for (const [category, p] of Object.entries(pooled)) {
    const negative = category === 'residential';
    const share = (negative ? p.any : p.expected) / p.addresses;
    const goal = GOALS[category];
    const met = goal === undefined ? '' : negative ? share <= goal : share >= goal;
    console.log(
      `  ${category.padEnd(12)} ${negative ? 'false positives' : 'as expected'} ${percent(negative ? p.any : p.expected, p.addresses, negative ? 2 : 1).padStart(6)}` +
        ` (${negative ? p.any : p.expected} of ${p.addresses} in ${p.sets} set(s))` +
        (goal === undefined ? '' : ` [${negative ? '<=' : '>='} ${(goal * 100).toFixed(1)}%: ${met ? 'met' : 'NOT met'}]`),
    );
  }

  const bySource = Object.fromEntries([...residentialBySource].sort((a, b) => b[1] - a[1]));
  if (residentialBySource.size > 0) {
    console.log('\nresidential addresses flagged, by source listing them (the evidence):');
    for (const [name, count] of Object.entries(bySource)) console.log(`  ${name.padEnd(28)} ${count}`);
  }

  mkdirSync(path.join(root, 'bench', 'results'), { recursive: true });
  const file = path.join(root, 'bench', 'results', `quality-${env.date.replace(/[:.]/g, '-')}.json`);
  writeFileSync(
    file,
    JSON.stringify({ environment: env, sources: options.sources, eval: options.eval, build, sets, pooled, residential_by_source: bySource }, null, 2),
  );
  console.log(`\nresults: ${path.relative(root, file)}`);
} finally {
  rmSync(work, { recursive: true, force: true });
}
