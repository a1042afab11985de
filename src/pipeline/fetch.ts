/**
 * Brings a `url` source to disk as <data>/feeds/<source name>: the source's
 * last good copy. What is known about each copy (its URL, ETag,
 * Last-Modified, download time, size, SHA-256, record count) is kept in
 * <data>/feeds/state.json.
 *
 * A request is conditional (If-None-Match / If-Modified-Since) when there is a
 * copy of the same URL: a 304 keeps it. A new download goes to a temporary
 * file and replaces the copy only when it is complete, within the size limit,
 * passes the importer's 1% rule, and has at least half the records of the copy
 * it replaces. Otherwise (and when the download fails after its retries) the
 * last good copy is used, with a warning that names the source and the reason.
 */
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream, existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { IprError } from '../errors.js';
import { IMPORTERS } from './importers.js';
import { RangeSink } from './ranges.js';
import { Records } from './records.js';
import { origin, type Source } from './sources.js';
import { redactUrls } from '../text.js';
import { Tally } from './tally.js';

/** The default size limit of one download (a source's `max_bytes` overrides it). */
export const MAX_FEED_BYTES = 512 * 1024 * 1024;
const PACKAGE_VERSION = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

export interface FetchOptions {
  /** An attempt fails after this long without receiving anything (headers or body), ms. Default 60 s. */
  timeoutMs?: number;
  /** Attempts after the first, for failures that may pass: network errors, timeouts, HTTP 5xx, 408, 429. Default 3. */
  retries?: number;
  /** The wait before the first retry, ms; it doubles with each retry. Default 1 s. */
  retryDelayMs?: number;
  /** Sources whose new copy may have fewer than half the records of the last good one. */
  acceptShrink?: readonly string[];
  /** Bytes received so far of a source's download, and its declared size when known. */
  onBytes?: (source: string, bytes: number, total: number | null) => void;
}

/** Where the data of a `url` source came from, as recorded in the snapshot's metadata. */
export interface FeedProvenance {
  url: string;
  /** When the copy used was downloaded. */
  fetched_at: string;
  /** When the upstream was asked, in this run. */
  checked_at: string;
  /** 200: a new copy; 304: the last good copy is current; null: no answer. */
  http_status: number | null;
  etag: string | null;
  last_modified: string | null;
  bytes: number;
  sha256: string;
  /** True when a new copy could not be had or was refused, and the last good copy was used instead. */
  used_last_good_copy: boolean;
  /** Why, when used_last_good_copy. */
  reason?: string;
}

export interface Fetched {
  file: string;
  provenance: FeedProvenance;
  /** Set when the last good copy is used instead of a new one. */
  warning?: string;
}

/** What state.json remembers of a source's last good copy. */
interface KeptCopy {
  url: string;
  etag: string | null;
  last_modified: string | null;
  fetched_at: string;
  bytes: number;
  sha256: string;
  /** Null when unknown (a copy kept before state.json existed). */
  records: number | null;
  bad_lines: number | null;
}

interface FeedState {
  sources: Record<string, KeptCopy>;
}

function feedsDir(dataDir: string): string {
  return path.join(dataDir, 'feeds');
}

function readState(dataDir: string): FeedState {
  try {
    const state = JSON.parse(readFileSync(path.join(feedsDir(dataDir), 'state.json'), 'utf8')) as FeedState;
    return typeof state?.sources === 'object' && state.sources !== null ? state : { sources: {} };
  } catch {
    return { sources: {} }; // none yet, or unreadable: every copy is then re-described from its file
  }
}

/** Records a source's new last good copy (read, change, replace atomically: the caller holds the data lock). */
function rememberCopy(dataDir: string, name: string, copy: KeptCopy): void {
  const state = readState(dataDir);
  state.sources[name] = copy;
  const file = path.join(feedsDir(dataDir), 'state.json');
  writeFileSync(`${file}.tmp`, `${JSON.stringify(state, null, 2)}\n`);
  renameSync(`${file}.tmp`, file);
}

export async function sha256File(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/** The kept copy of a source as state.json describes it, or as its file does when state.json does not. */
async function keptCopy(state: FeedState, source: Source, file: string): Promise<KeptCopy | null> {
  if (!existsSync(file)) return null;
  const known = state.sources[source.name];
  if (known) return known;
  const stat = statSync(file);
  return { url: source.url!, etag: null, last_modified: null, fetched_at: stat.mtime.toISOString(), bytes: stat.size, sha256: await sha256File(file), records: null, bad_lines: null };
}

/** A failed attempt; `retry` when another attempt may succeed. */
function failure(message: string, retry: boolean, status: number | null = null): IprError {
  return new IprError('source_unreadable', message, { retry, status });
}

interface Downloaded {
  status: 200;
  etag: string | null;
  lastModified: string | null;
  bytes: number;
  sha256: string;
}

/** One attempt: a conditional GET of `url` into `part`; resolves 304 or the new copy. */
async function attempt(source: Source, part: string, kept: KeptCopy | null, options: FetchOptions): Promise<Downloaded | { status: 304 }> {
  const timeoutMs = options.timeoutMs ?? 60_000;
  const limit = source.max_bytes ?? MAX_FEED_BYTES;
  const controller = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  let timedOut = false;
  // An idle timeout, not a total one: a large feed on a slow link keeps going while bytes arrive.
  const arm = () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      timedOut = true;
      controller.abort();
    }, timeoutMs);
  };
  const headers: Record<string, string> = { 'user-agent': `ip-reputation/${PACKAGE_VERSION} (ipr update)` };
  const current = kept !== null && kept.url === source.url ? kept : null;
  if (current !== null) {
    if (current.etag) headers['if-none-match'] = current.etag;
    if (current.last_modified) headers['if-modified-since'] = current.last_modified;
  }
  let bytes = 0;
  let declared: number | null = null;
  let status: number | null = null;
  try {
    arm();
    const response = await fetch(source.url!, { headers, signal: controller.signal, redirect: 'follow' });
    status = response.status;
    if (response.status === 304 && current !== null) return { status: 304 };
    if (response.status !== 200 || response.body === null) {
      await response.body?.cancel(); // let the connection go
      const retry = response.status >= 500 || response.status === 408 || response.status === 429;
      throw failure(`HTTP ${response.status}${response.statusText ? ` ${response.statusText}` : ''}`, retry, response.status);
    }
    const length = response.headers.get('content-length');
    // With a content encoding, Content-Length counts the encoded bytes, not those read here.
    declared = length !== null && !response.headers.has('content-encoding') ? Number(length) : null;
    if (declared !== null && declared > limit) {
      await response.body.cancel();
      throw failure(`${declared} bytes, over the limit of ${limit}`, false, 200);
    }
    const hash = createHash('sha256');
    const counted = async function* (chunks: AsyncIterable<Buffer>) {
      for await (const chunk of chunks) {
        arm();
        bytes += chunk.length;
        if (bytes > limit) throw failure(`over the limit of ${limit} bytes`, false, 200);
        hash.update(chunk);
        options.onBytes?.(source.name, bytes, declared);
        yield chunk;
      }
    };
    await pipeline(Readable.fromWeb(response.body as import('node:stream/web').ReadableStream), counted, createWriteStream(part));
    if (declared !== null && bytes !== declared) throw failure(`the download ended after ${bytes} of ${declared} bytes`, true, 200);
    return { status: 200, etag: response.headers.get('etag'), lastModified: response.headers.get('last-modified'), bytes, sha256: hash.digest('hex') };
  } catch (error) {
    if (timedOut) throw failure(`no data for ${timeoutMs / 1000} s (timed out${bytes ? ` after ${bytes} bytes` : ''})`, true, status);
    if (error instanceof IprError) throw error;
    // fetch() failures carry the system error as their cause ("fetch failed", cause ECONNREFUSED).
    const cause = (error as Error).cause as Error | undefined;
    // fetch quotes the URL in some messages ("...a URL that includes credentials: <url>").
    const text = redactUrls(`${(error as Error).message}${cause?.message ? ` (${cause.message})` : ''}`);
    throw failure(bytes > 0 ? `the download was cut after ${bytes}${declared !== null ? ` of ${declared}` : ''} bytes: ${text}` : text, true, status);
  } finally {
    clearTimeout(timer);
  }
}

/** Counts a file's records and bad lines with the source's importer, storing nothing. */
async function countRecords(source: Source, file: string): Promise<Tally> {
  const tally = new Tally(source.name, origin(source));
  const sink = new RangeSink({ add() {} });
  await IMPORTERS[source.format]({ source, index: 0, file, sink, records: new Records(), tally, resolveNames: false, progress: () => {}, warn: () => {} });
  return tally;
}

/** Why a new copy was not had or not taken. */
interface Refused {
  reason: string;
  error: IprError;
  status: number | null;
}

/** Judges a complete download: the importer's rules, then the shrink rule against the kept copy. */
async function judge(source: Source, part: string, kept: KeptCopy | null, options: FetchOptions): Promise<Tally | Refused> {
  const prefix = `source ${source.name}: `;
  let tally: Tally;
  try {
    tally = await countRecords(source, part);
    tally.check();
  } catch (error) {
    if (!(error instanceof IprError)) throw error;
    const first = error.message.split('\n')[0]!;
    return { reason: `the new copy is not usable: ${first.startsWith(prefix) ? first.slice(prefix.length) : first}`, error, status: 200 };
  }
  const before = kept !== null && kept.url === source.url ? kept.records : null;
  if (before !== null && tally.records < before / 2 && !options.acceptShrink?.includes(source.name)) {
    const reason =
      `the new copy has ${tally.records.toLocaleString('en-US')} records, fewer than half of the last good copy's ` +
      `${before.toLocaleString('en-US')} (ipr update --accept-shrink ${source.name} takes it)`;
    return { reason, error: new IprError('source_unreadable', prefix + reason), status: 200 };
  }
  return tally;
}

/** Downloads with retries and judges the result: a new copy (now in place), 304, or why neither. */
async function newCopy(source: Source, dataDir: string, kept: KeptCopy | null, options: FetchOptions): Promise<KeptCopy | 304 | Refused> {
  const file = path.join(feedsDir(dataDir), source.name);
  const part = `${file}.part`;
  const retries = options.retries ?? 3;
  for (let tries = 0; ; tries++) {
    try {
      const got = await attempt(source, part, kept, options);
      if (got.status === 304) return 304;
      const judged = await judge(source, part, kept, options);
      if (!(judged instanceof Tally)) return judged;
      renameSync(part, file);
      const copy: KeptCopy = {
        url: source.url!,
        etag: got.etag,
        last_modified: got.lastModified,
        fetched_at: new Date().toISOString(),
        bytes: got.bytes,
        sha256: got.sha256,
        records: judged.records,
        bad_lines: judged.bad,
      };
      rememberCopy(dataDir, source.name, copy);
      return copy;
    } catch (error) {
      if (!(error instanceof IprError)) throw error;
      if (error.details.retry === true && tries < retries) {
        await sleep((options.retryDelayMs ?? 1000) * 2 ** tries);
        continue;
      }
      const status = (error.details.status as number | null | undefined) ?? null;
      return { reason: tries > 0 ? `${error.message} (${tries + 1} attempts)` : error.message, error, status };
    } finally {
      rmSync(part, { force: true });
    }
  }
}

/**
 * Brings a `url` source's data to disk; see the module comment. Throws an
 * IprError naming the source when there is neither a usable new copy nor a
 * last good one.
 */
export async function fetchSource(source: Source, dataDir: string, options: FetchOptions = {}): Promise<Fetched> {
  mkdirSync(feedsDir(dataDir), { recursive: true });
  const file = path.join(feedsDir(dataDir), source.name);
  const kept = await keptCopy(readState(dataDir), source, file);
  const checkedAt = new Date().toISOString();
  const got = await newCopy(source, dataDir, kept, options);
  if (got === 304) {
    return { file, provenance: { ...described(kept!), checked_at: checkedAt, http_status: 304, used_last_good_copy: false } };
  }
  if (!('reason' in got)) {
    return { file, provenance: { ...described(got), checked_at: checkedAt, http_status: 200, used_last_good_copy: false } };
  }
  const { reason, error, status } = got;
  if (kept === null) {
    const why = `source ${source.name}: ${origin(source)}: ${reason}; there is no earlier copy to use`;
    throw error.code === 'source_unreadable' ? new IprError('source_unreadable', why) : new IprError(error.code, `${why}\n${error.message}`);
  }
  return {
    file,
    provenance: { ...described(kept), checked_at: checkedAt, http_status: status, used_last_good_copy: true, reason },
    warning: `source ${source.name}: ${origin(source)}: ${reason}; using the last good copy (fetched ${kept.fetched_at})`,
  };
}

function described(copy: KeptCopy): Omit<FeedProvenance, 'checked_at' | 'http_status' | 'used_last_good_copy'> {
  return {
    url: copy.url,
    fetched_at: copy.fetched_at,
    etag: copy.etag,
    last_modified: copy.last_modified,
    bytes: copy.bytes,
    sha256: copy.sha256,
  };
}
