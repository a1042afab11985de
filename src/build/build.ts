/**
 * `ipr build`: every source of a sources configuration through its importer
 * into the native writer, then one new snapshot file, published atomically.
 * A source that cannot be used fails the build before anything is published.
 */
import { readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import { IprError } from '../errors.js';
import { native } from '../native.js';
import { fetchSource } from './fetch.js';
import { IMPORTERS } from './importers.js';
import { newSnapshotPath, partialPath, prune, publish, removeAbandoned } from './publish.js';
import { RangeSink } from './ranges.js';
import { Records } from './records.js';
import { loadSources, localPath, origin, type Source, type SourcesConfig } from './sources.js';
import { Tally } from './tally.js';

const TABLE_NAMES = ['tor', 'vpn', 'proxy', 'relay', 'hosting', 'asn', 'geo'] as const;
const PACKAGE_VERSION = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

export interface BuildOptions {
  /** A sources configuration file, or one already loaded. */
  sources: string | SourcesConfig;
  /** The data folder: snapshots/ and feeds/ live under it. */
  dataDir: string;
  /** Older snapshots to keep besides the published one (default 2). */
  keep?: number;
  /** Build from the sources that can be reached, warning about the others (for `npm start`). */
  skipUnreachable?: boolean;
  onProgress?: (event: BuildProgress) => void;
  onWarning?: (message: string) => void;
}

export type BuildProgress =
  | { phase: 'source'; index: number; total: number; source: string; fraction: number }
  | { phase: 'compile' | 'write' };

export interface SourceSummary {
  name: string;
  kind: string;
  format: string;
  location: string;
  file: string;
  records: number;
  bad_lines: number;
  seconds: number;
  license?: string;
  fetched_at?: string;
  skipped?: string;
}

export interface TableSummary {
  name: string;
  ranges: [number, number];
  prefixes: [number, number];
}

export interface BuildSummary {
  snapshot: string;
  builtAt: string;
  seconds: number;
  fileBytes: number;
  sources: SourceSummary[];
  tables: TableSummary[];
  flaggedAsnRecords: number;
  records: { companies: number; asns: number; locations: number };
  intervals: [number, number];
  leaves: [number, number];
  trieBytes: [number, number];
  warnings: string[];
  pruned: string[];
}

async function resolveFile(config: SourcesConfig, source: Source, dataDir: string, warn: (m: string) => void) {
  if (source.url === undefined) return localPath(config, source);
  const fetched = await fetchSource(source, dataDir);
  if (fetched.warning) warn(fetched.warning);
  return fetched.file;
}

export async function buildSnapshot(options: BuildOptions): Promise<BuildSummary> {
  const started = process.hrtime.bigint();
  const builtAt = new Date();
  const config = typeof options.sources === 'string' ? loadSources(options.sources) : options.sources;
  const warnings: string[] = [];
  const warn = (message: string) => {
    warnings.push(message);
    options.onWarning?.(message);
  };
  const writer = new native.SnapshotWriter();
  const sink = new RangeSink(writer);
  const records = new Records();
  const summaries: SourceSummary[] = [];

  // Downloads run side by side; imports then run in the configuration's order.
  const files = await Promise.all(
    config.sources.map((source) => resolveFile(config, source, options.dataDir, warn).then((file) => ({ file }), (error: unknown) => ({ error }))),
  );
  for (const [index, source] of config.sources.entries()) {
    const sourceStart = process.hrtime.bigint();
    const report = (fraction: number) =>
      options.onProgress?.({ phase: 'source', index, total: config.sources.length, source: source.name, fraction });
    report(0);
    let file: string;
    try {
      const resolved = files[index]!;
      if ('error' in resolved) throw resolved.error;
      file = resolved.file;
    } catch (error) {
      if (!options.skipUnreachable || !(error instanceof IprError) || error.code !== 'source_unreadable') throw error;
      warn(`${error.message}; building without it`);
      summaries.push({ ...describe(source), file: '', records: 0, bad_lines: 0, seconds: 0, skipped: error.message });
      continue;
    }
    const tally = new Tally(source.name, file);
    try {
      await IMPORTERS[source.format]({ source, file, sink, records, tally, progress: report });
    } catch (error) {
      if (error instanceof IprError) throw error;
      const code = (error as NodeJS.ErrnoException).code;
      throw new IprError('source_unreadable', `source ${source.name}: ${file}: ${code ? `${code} ` : ''}${(error as Error).message}`);
    }
    tally.check();
    for (const line of tally.describeSamples()) warn(`bad line: ${line}`);
    if (tally.bad > tally.samples.length) warn(`source ${source.name}: ${tally.bad - tally.samples.length} more bad lines`);
    summaries.push({
      ...describe(source),
      file,
      records: tally.records,
      bad_lines: tally.bad,
      seconds: Number(process.hrtime.bigint() - sourceStart) / 1e9,
      ...(source.url ? { fetched_at: statSync(file).mtime.toISOString() } : {}),
    });
  }

  options.onProgress?.({ phase: 'compile' });
  sink.flush();
  records.toNative(writer);
  const stats = writer.compile();
  const tables: TableSummary[] = TABLE_NAMES.map((name, t) => ({
    name,
    ranges: stats.tables[t]!.ranges,
    prefixes: stats.tables[t]!.prefixes,
  }));
  const recordCounts = { companies: records.companies.size, asns: records.asns.size, locations: records.locations.size };
  const meta = {
    format_version: native.formatVersion,
    built_at: builtAt.toISOString(),
    builder: `ip-reputation ${PACKAGE_VERSION}`,
    sources_file: config.file,
    sources: summaries.map(({ seconds: _seconds, ...s }) => s),
    tables: Object.fromEntries(tables.map((t) => [t.name, { ipv4: t.prefixes[0], ipv6: t.prefixes[1] }])),
    flagged_asn_records: records.flaggedAsnRecords(),
    records: recordCounts,
    intervals: { ipv4: stats.intervals[0], ipv6: stats.intervals[1] },
  };

  options.onProgress?.({ phase: 'write' });
  const file = newSnapshotPath(options.dataDir, builtAt);
  for (const name of removeAbandoned(options.dataDir)) warn(`removed ${name}, left by a build that did not finish`);
  const partial = partialPath(file);
  writer.write(partial, JSON.stringify(meta), builtAt.getTime());
  try {
    renameSync(partial, file);
    publish(options.dataDir, file);
  } catch (error) {
    rmSync(partial, { force: true });
    rmSync(file, { force: true });
    if (error instanceof IprError) throw error;
    throw new IprError('write_failed', `snapshot ${file}: ${(error as Error).message}`);
  }
  const pruned = prune(options.dataDir, (options.keep ?? 2) + 1);
  return {
    snapshot: file,
    builtAt: meta.built_at,
    seconds: Number(process.hrtime.bigint() - started) / 1e9,
    fileBytes: statSync(file).size,
    sources: summaries,
    tables,
    flaggedAsnRecords: meta.flagged_asn_records,
    records: recordCounts,
    intervals: stats.intervals,
    leaves: stats.leaves,
    trieBytes: stats.trieBytes,
    warnings,
    pruned,
  };
}

function describe(source: Source) {
  return {
    name: source.name,
    kind: source.kind,
    format: source.format,
    location: origin(source),
    ...(source.license ? { license: source.license } : {}),
  };
}
