/**
 * The snapshot commands: build, update, rollback (they publish into a data
 * folder), lookup, info and export (they read what is published).
 */
import { buildSnapshot } from '../pipeline/build.js';
import { exportMmdb } from '../pipeline/mmdb-export.js';
import { announcePublished, currentNotice, withBuilderLock } from '../pipeline/distribute.js';
import { builtAtOfName, publishedName, rollback, withDataLock } from '../pipeline/publish.js';
import { RedisConnection } from '../store/redis-connection.js';
import { updateSnapshot, type UpdateOptions, type UpdateResult } from '../pipeline/update.js';
import { openSnapshot } from '../snapshot.js';
import { dataDirOf, integerOption, keepOption, listOption, options, STORE_OPTION, storeUrlOf, UsageError, type Command } from './args.js';
import { endProgress, formatBytes, printSummary, progressPrinter, table, warningPrinter } from './output.js';

async function build(args: string[]): Promise<number> {
  const { values } = options(args, {
    sources: { type: 'string' },
    keep: { type: 'string' },
    'skip-unreachable': { type: 'boolean' },
  });
  if (!values.sources) throw new UsageError('build needs --sources FILE');
  const summary = await buildSnapshot({
    sources: values.sources,
    dataDir: dataDirOf(values),
    ...keepOption(values.keep),
    skipUnreachable: values['skip-unreachable'] === true,
    onProgress: progressPrinter(),
    onWarning: warningPrinter(),
  });
  endProgress();
  printSummary(summary);
  return 0;
}

/** The one-line JSON `ipr update --json` prints (what `ipr serve --update-interval` reads). */
function updateReport(r: UpdateResult): object {
  const base = { result: r.result, seconds: Number(r.seconds.toFixed(3)) };
  if (r.result === 'held') return { ...base, hold: r.hold };
  const fallbacks = r.sources.filter((s) => s.status === 'last_good_copy' || s.status === 'skipped');
  const snapshot = r.result === 'published' ? r.summary.snapshot : r.snapshot;
  return { ...base, snapshot, sources: r.sources, fallbacks: fallbacks.length, ...(r.result === 'published' ? { pruned: r.summary.pruned } : {}) };
}

/**
 * An update on the builder of several nodes: under the builder lock (two
 * builders never build at once: build_locked), then the published snapshot
 * announced to the followers, to be downloaded from `baseUrl` (the builder's
 * admin port), unless it is announced already.
 */
async function asBuilder(storeUrl: string, updateOptions: UpdateOptions, baseUrl: string): Promise<UpdateResult> {
  const connection = await RedisConnection.open(storeUrl, { name: 'ipr-builder' });
  try {
    return await withBuilderLock(connection, async () => {
      const result = await updateSnapshot(updateOptions);
      const published = publishedName(updateOptions.dataDir);
      if (published !== null && (await currentNotice(connection))?.name !== published) {
        const notice = await announcePublished(connection, updateOptions.dataDir, baseUrl);
        process.stderr.write(`ipr: announced ${notice.name} (${formatBytes(notice.bytes)}, SHA-256 ${notice.sha256}) at ${notice.url}\n`);
      }
      return result;
    });
  } finally {
    await connection.close();
  }
}

async function update(args: string[]): Promise<number> {
  const { values } = options(args, {
    sources: { type: 'string' },
    keep: { type: 'string' },
    force: { type: 'boolean' },
    timeout: { type: 'string' },
    retries: { type: 'string' },
    'accept-shrink': { type: 'string' },
    'skip-unreachable': { type: 'boolean' },
    json: { type: 'boolean' },
    ...STORE_OPTION,
    announce: { type: 'string' },
  });
  if (!values.sources) throw new UsageError('update needs --sources FILE');
  const store = storeUrlOf(values);
  if (values.announce !== undefined && store === undefined) throw new UsageError('--announce needs --store (or IPR_STORE)');
  const timeout = values.timeout === undefined ? undefined : Number(values.timeout);
  if (timeout !== undefined && !(timeout > 0 && timeout <= 3600)) throw new UsageError('--timeout takes seconds, more than 0 and at most 3600');
  const retries = integerOption(values.retries, '--retries', undefined);
  const updateOptions: UpdateOptions = {
    sources: values.sources,
    dataDir: dataDirOf(values),
    ...keepOption(values.keep),
    force: values.force === true,
    skipUnreachable: values['skip-unreachable'] === true,
    fetch: {
      ...(timeout === undefined ? {} : { timeoutMs: timeout * 1000 }),
      ...(retries === undefined ? {} : { retries }),
      acceptShrink: listOption(values['accept-shrink']),
    },
    onProgress: progressPrinter(),
    onWarning: warningPrinter(),
  };
  const result = values.announce === undefined ? await updateSnapshot(updateOptions) : await asBuilder(store!, updateOptions, values.announce);
  endProgress();
  if (values.json) {
    process.stdout.write(`${JSON.stringify(updateReport(result))}\n`);
    return 0;
  }
  if (result.result === 'held') {
    process.stdout.write(
      `ipr: updates are held since the rollback of ${result.hold.at} (from ${result.hold.from} to ${result.hold.to}); ` +
        '"ipr update --force" builds anyway and ends the hold\n',
    );
    return 0;
  }
  const rows = result.sources.map((s) => [s.name, s.status.replace(/_/g, ' '), s.reason ?? '']);
  process.stdout.write(`${table([['source', 'status', 'note'], ...rows], 99)}\n\n`);
  if (result.result === 'unchanged') {
    process.stdout.write(`ipr: nothing changed; ${result.snapshot} still holds these inputs (--force builds anyway)\n`);
    return 0;
  }
  printSummary(result.summary);
  return 0;
}

async function rollbackCommand(args: string[]): Promise<number> {
  const { values } = options(args, {});
  const dataDir = dataDirOf(values);
  const hold = await withDataLock(dataDir, async () => rollback(dataDir));
  process.stdout.write(
    `ipr: published ${hold.to} (built ${builtAtOfName(hold.to)}) in place of ${hold.from} (built ${builtAtOfName(hold.from)}); ` +
      'updates are held until "ipr update --force" or "ipr build"\n',
  );
  return 0;
}

async function lookup(args: string[]): Promise<number> {
  const { values, positionals } = options(args, { explain: { type: 'boolean' } }, true);
  if (positionals.length === 0) throw new UsageError('lookup needs at least one address');
  const snapshot = openSnapshot(dataDirOf(values));
  try {
    const answers = snapshot.lookupMany(positionals);
    const results = values.explain ? answers.map((r, i) => ('error' in r ? r : snapshot.explain(positionals[i]!))) : answers;
    const body = results.length === 1 ? results[0] : results;
    process.stdout.write(`${JSON.stringify(body, null, 2)}\n`);
    return results.some((r) => 'error' in r) ? 1 : 0;
  } finally {
    snapshot.close();
  }
}

async function info(args: string[]): Promise<number> {
  const { values } = options(args, {});
  const snapshot = openSnapshot(dataDirOf(values));
  try {
    const { path: file, format_version, built_at, ...rest } = snapshot.info();
    const age_seconds = Math.round((Date.now() - Date.parse(built_at)) / 1000);
    process.stdout.write(`${JSON.stringify({ path: file, format_version, built_at, age_seconds, ...rest }, null, 2)}\n`);
    return 0;
  } finally {
    snapshot.close();
  }
}

/** The formats `ipr export` writes. */
const EXPORT_FORMATS = ['mmdb'];

async function exportCommand(args: string[]): Promise<number> {
  const { values } = options(args, { format: { type: 'string' }, out: { type: 'string' } });
  if (values.format === undefined) throw new UsageError(`export needs --format (${EXPORT_FORMATS.join(', ')})`);
  if (!EXPORT_FORMATS.includes(values.format)) throw new UsageError(`export --format takes ${EXPORT_FORMATS.join(', ')}, not "${values.format}"`);
  if (!values.out) throw new UsageError('export needs --out FILE');
  const s = exportMmdb({ dataDir: dataDirOf(values), out: values.out });
  const rows = [
    ['file', s.file],
    ['snapshot', s.snapshot],
    ['size', `${formatBytes(s.bytes)} (data section ${formatBytes(s.dataBytes)})`],
    ['prefixes', `${s.prefixes[0].toLocaleString('en-US')} IPv4, ${s.prefixes[1].toLocaleString('en-US')} IPv6`],
    ['records', `${s.answers.toLocaleString('en-US')} distinct answers`],
    ['tree', `${s.nodeCount.toLocaleString('en-US')} nodes, ${s.recordSize}-bit records`],
    ['seconds', s.seconds.toFixed(1)],
  ];
  process.stdout.write(`${table(rows, 99)}\n`);
  return 0;
}

export const snapshotCommands: Command[] = [
  {
    name: 'build',
    usage: `build  --sources FILE [--data DIR] [--keep N] [--skip-unreachable]
         Build a snapshot from the sources configuration FILE and publish it in DIR.`,
    run: build,
  },
  {
    name: 'update',
    usage: `update --sources FILE [--data DIR] [--keep N] [--force] [--timeout S] [--retries N]
         [--accept-shrink NAME,...] [--skip-unreachable] [--json] [--store URL --announce BASE_URL]
         Fetch every source (conditional requests; a failed, broken or shrunken download
         keeps the last good copy), then build and publish unless nothing changed.
         --announce: the builder of several nodes takes the builder lock in the shared
         store and announces the published snapshot, served from BASE_URL/snapshots/.`,
    run: update,
  },
  {
    name: 'rollback',
    usage: `rollback [--data DIR]
         Publish the snapshot before the published one, and hold updates until
         "update --force" or "build".`,
    run: rollbackCommand,
  },
  {
    name: 'lookup',
    usage: `lookup IP... [--data DIR] [--explain]
         Print the check result of each address, as the API answers it; --explain adds
         its evidence: which sources list it (table, source, listed prefix).`,
    run: lookup,
  },
  {
    name: 'info',
    usage: `info   [--data DIR]
         Print the published snapshot's metadata: build time and age, and every source's
         provenance (origin, fetched-at, ETag, records, bad lines, last good copy used).`,
    run: info,
  },
  {
    name: 'export',
    usage: `export --format mmdb --out FILE [--data DIR]
         Write the published snapshot as a MaxMind DB (format 2.0): every answer under the
         check result's names and the GeoIP2 City, ASN and Anonymous IP paths.`,
    run: exportCommand,
  },
];
