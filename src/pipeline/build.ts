/**
 * `ipr build`: every source of a sources configuration through its importer
 * into the native writer, then one new snapshot file, published atomically.
 * A source that cannot be used fails the build before anything is published.
 *
 * In two steps, so that `ipr update` (update.ts) can stop between them:
 * collectInputs() brings every source to disk (downloads: fetch.ts) and says
 * where each came from; buildFromInputs() imports them and publishes.
 */
import { createHash } from 'node:crypto';
import { readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import { IprError } from '../errors.js';
import { native } from '../native.js';
import { TABLES } from '../result.js';
import { fetchSource, type FeedProvenance, type FetchOptions } from './fetch.js';
import { IMPORTERS } from './importers.js';
import { clearHold, newSnapshotPath, partialPath, prune, publish, removeAbandoned, withDataLock } from './publish.js';
import { RangeSink } from './ranges.js';
import { asciiJson, Records } from './records.js';
import { loadSources, localPath, origin, type Source, type SourcesConfig } from './sources.js';
import { Tally } from './tally.js';
import { NetworkScale, WeakListings } from './trust.js';

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
  /** Timeouts, retries and the shrink rule of downloads. */
  fetch?: FetchOptions;
  onProgress?: (event: BuildProgress) => void;
  onWarning?: (message: string) => void;
}

export type BuildProgress =
  | { phase: 'download'; done: number; total: number; bytes: number }
  | { phase: 'source'; index: number; total: number; source: string; fraction: number }
  | { phase: 'compile' | 'write' };

/** Where a `path` or `package` source's data came from. */
export interface LocalProvenance {
  modified_at: string;
  bytes: number;
}

/**
 * One source in a snapshot's metadata (its provenance): the configuration's
 * description, the file imported, the counts, and for a `url` source the
 * download (fetch.ts FeedProvenance: fetched_at, checked_at, http_status,
 * etag, last_modified, bytes, sha256, used_last_good_copy and its reason);
 * for a local file its modification time and size.
 */
export interface SourceSummary extends Partial<Omit<FeedProvenance, 'url'>>, Partial<LocalProvenance> {
  name: string;
  kind: string;
  format: string;
  location: string;
  file: string;
  records: number;
  bad_lines: number;
  /** Listings of a source below trust 1 that the trust rule left out (trust.ts). */
  left_out?: number;
  /** Host names that did not resolve (their addresses are left out). */
  unresolved?: number;
  seconds: number;
  license?: string;
  /** Why the source was left out of the build: unreachable, or older than its max_age. */
  skipped?: string;
}

/** A source brought to disk, or skipped (unreachable, with skipUnreachable; or older than its max_age). */
export interface SourceInput {
  source: Source;
  file: string | null;
  provenance: Omit<FeedProvenance, 'url'> | LocalProvenance | null;
  skipped?: string;
}

export interface Inputs {
  config: SourcesConfig;
  sources: SourceInput[];
  /**
   * Identifies what a build from these inputs would contain: the builder, the
   * configuration, and each file's SHA-256 (downloads) or size and time (local
   * files). Recorded in the snapshot's metadata as `inputs`.
   */
  fingerprint: string;
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

async function collectOne(config: SourcesConfig, source: Source, options: BuildOptions, onFetched: () => void): Promise<SourceInput> {
  if (source.url === undefined) {
    const file = localPath(config, source);
    let stat;
    try {
      stat = statSync(file);
    } catch (error) {
      throw new IprError('source_unreadable', `source ${source.name}: ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
    }
    return { source, file, provenance: { modified_at: stat.mtime.toISOString(), bytes: stat.size } };
  }
  try {
    const fetched = await fetchSource(source, options.dataDir, options.fetch);
    if (fetched.warning) options.onWarning?.(fetched.warning);
    const { url: _url, ...provenance } = fetched.provenance;
    return { source, file: fetched.file, provenance };
  } finally {
    onFetched();
  }
}

/**
 * Brings every source to disk, downloads side by side (fetch.ts: the last
 * good copy stands in for a failed or refused download). Throws the first
 * failure in the configuration's order, unless skipUnreachable skips it.
 */
export async function collectInputs(options: BuildOptions): Promise<Inputs> {
  const config = typeof options.sources === 'string' ? loadSources(options.sources) : options.sources;
  const downloads = config.sources.filter((s) => s.url !== undefined).length;
  let done = 0;
  const bytes = new Map<string, number>();
  const report = () => {
    let total = 0;
    for (const b of bytes.values()) total += b;
    options.onProgress?.({ phase: 'download', done, total: downloads, bytes: total });
  };
  const fetchOptions: FetchOptions = {
    ...options.fetch,
    onBytes: (source, received, declared) => {
      bytes.set(source, received);
      options.fetch?.onBytes?.(source, received, declared);
      report();
    },
  };
  const settled = await Promise.allSettled(
    config.sources.map((source) =>
      collectOne(config, source, { ...options, fetch: fetchOptions }, () => {
        done++;
        report();
      }),
    ),
  );
  const now = Date.now();
  const sources = settled.map((result, index): SourceInput => {
    const source = config.sources[index]!;
    if (result.status === 'fulfilled') {
      const stale = staleness(source, result.value.provenance, now);
      if (stale === null) return result.value;
      options.onWarning?.(`source ${source.name}: ${stale}; building without it`);
      return { ...result.value, file: null, skipped: stale };
    }
    const error = result.reason as unknown;
    if (!options.skipUnreachable || !(error instanceof IprError) || error.code !== 'source_unreadable') throw error;
    options.onWarning?.(`${error.message}; building without it`);
    return { source, file: null, provenance: null, skipped: error.message };
  });
  const identity = sources.map(({ source, provenance, skipped }) => ({
    source,
    data: skipped !== undefined ? null : provenance !== null && 'sha256' in provenance ? provenance.sha256 : provenance,
  }));
  const fingerprint = createHash('sha256')
    .update(JSON.stringify({ builder: PACKAGE_VERSION, format: native.formatVersion, sources: identity }))
    .digest('hex');
  return { config, sources, fingerprint };
}

/**
 * Why a source's copy is too old to use (its `max_age`), or null. The age
 * of a download is from when the copy used was fetched (a last good copy
 * ages while its upstream fails); of a local file, from its modification.
 */
function staleness(source: Source, provenance: SourceInput['provenance'], now: number): string | null {
  if (source.maxAgeMs === undefined || provenance === null) return null;
  const at = 'fetched_at' in provenance ? provenance.fetched_at : provenance.modified_at;
  const age = now - Date.parse(at);
  if (!(age > source.maxAgeMs)) return null;
  return `its copy (from ${at}) is ${duration(age)} old, more than its max_age of ${duration(source.maxAgeMs)}`;
}

function duration(ms: number): string {
  if (ms < 120_000) return `${Math.round(ms / 1000)} s`;
  return ms < 48 * 3_600_000 ? `${(ms / 3_600_000).toFixed(1)} h` : `${(ms / 86_400_000).toFixed(1)} d`;
}

/** `ipr build`: collects the sources, builds a snapshot and publishes it, holding the data folder's lock. */
export async function buildSnapshot(options: BuildOptions): Promise<BuildSummary> {
  const started = process.hrtime.bigint();
  const summary = await withDataLock(options.dataDir, async () => buildFromInputs(await collectInputs(options), options));
  return { ...summary, seconds: Number(process.hrtime.bigint() - started) / 1e9 };
}

/** Imports collected inputs, writes a new snapshot and publishes it; the caller holds the data folder's lock. */
export async function buildFromInputs(inputs: Inputs, options: BuildOptions): Promise<BuildSummary> {
  const started = process.hrtime.bigint();
  const builtAt = new Date();
  const config = inputs.config;
  const warnings: string[] = [];
  const warn = (message: string) => {
    warnings.push(message);
    options.onWarning?.(message);
  };
  const writer = new native.SnapshotWriter();
  const sink = new RangeSink(writer);
  const weak = new WeakListings();
  const records = new Records();
  const summaries: SourceSummary[] = [];
  // A source's index in the configuration is its id in the snapshot's evidence.
  for (const source of config.sources) records.sources.id(asciiJson(source.name));

  for (const [index, source] of config.sources.entries()) {
    const sourceStart = process.hrtime.bigint();
    const report = (fraction: number) =>
      options.onProgress?.({ phase: 'source', index, total: config.sources.length, source: source.name, fraction });
    report(0);
    const input = inputs.sources[index]!;
    if (input.file === null) {
      summaries.push({ ...describe(source), file: '', records: 0, bad_lines: 0, seconds: 0, ...input.provenance, skipped: input.skipped! });
      continue;
    }
    const file = input.file;
    const tally = new Tally(source.name, file);
    sink.source = index;
    const trust = source.trust ?? 1;
    try {
      await IMPORTERS[source.format]({
        source,
        index,
        file,
        sink: trust < 1 ? weak.sinkFor(index, trust) : sink,
        records,
        tally,
        resolveNames: true,
        progress: report,
        warn,
      });
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
      ...(tally.unresolved > 0 ? { unresolved: tally.unresolved } : {}),
      seconds: Number(process.hrtime.bigint() - sourceStart) / 1e9,
      ...input.provenance,
    });
  }

  options.onProgress?.({ phase: 'compile' });
  sink.flush();
  // The trust rule needs every ASN range in (trust.ts): sources below trust 1 last.
  const scale = new NetworkScale(writer, records);
  const leftOut = weak.resolve(sink, scale);
  for (const [index, count] of records.resolveAsnFlags(scale)) leftOut.set(index, (leftOut.get(index) ?? 0) + count);
  for (const [index, count] of leftOut) summaries[index]!.left_out = count;
  sink.flush();
  records.toNative(writer);
  const stats = writer.compile();
  const tables: TableSummary[] = TABLES.map((name, t) => ({
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
    inputs: inputs.fingerprint,
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
  clearHold(options.dataDir); // a snapshot built on purpose ends a rollback's hold
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
