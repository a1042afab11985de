/**
 * Snapshots across nodes: one builder, many followers, through Redis.
 *
 * - The builder is whoever holds the builder lock, `<prefix>{snapshots}:lock`:
 *   SET NX PX with a random token, renewed while the build runs, released
 *   by a script that deletes it only while it still holds that token (a
 *   builder that stalled past the lock's time cannot release the next one's).
 *   Two builders never build at once.
 * - After publishing in its own data folder, the builder announces the
 *   snapshot: its file name, size, SHA-256 and the URL it serves it from,
 *   in the hash `<prefix>{snapshots}:current` and as an entry of the stream
 *   `<prefix>{snapshots}:notices`, both in one script.
 * - The builder serves published snapshot files from its admin port:
 *   `GET /snapshots/<file name>` (serveSnapshotFile), behind the admin
 *   token when one is set.
 * - A follower (`ipr serve --follow`) reads the announcement at start and
 *   then follows the notices. For a snapshot it does not have, it downloads
 *   the file to a partial file, counting bytes and hashing as they arrive,
 *   and publishes it with the data folder's own publication (publish.ts)
 *   only when size and SHA-256 match; the server's watch then swaps it in.
 *   A download that fails, or a file that does not match, is removed, the
 *   last good snapshot keeps serving, and the follower says why.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream, existsSync, fsyncSync, openSync, closeSync, renameSync, rmSync, statSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import { IprError } from '../errors.js';
import { LuaScript, type RedisConnection } from '../store/redis-connection.js';
import { partialPath, publish, publishedName, SNAPSHOT_PATTERN, snapshotsDir } from './publish.js';

/** A published snapshot as announced to the followers. */
export interface SnapshotNotice {
  /** The file name (snap-...mdb). */
  name: string;
  bytes: number;
  sha256: string;
  /** Where followers download it: the builder's admin port, `/snapshots/<name>`. */
  url: string;
  /** ISO time of the announcement, on the builder's clock. */
  announced: string;
}

/** The builder lock is held this long unless renewed (renewed every third of it while the work runs). */
export const BUILDER_LOCK_MS = 30_000;

const RENEW = new LuaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
`);

const RELEASE = new LuaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`);

const ANNOUNCE = new LuaScript(`
redis.call('HSET', KEYS[1], 'name', ARGV[1], 'bytes', ARGV[2], 'sha256', ARGV[3], 'url', ARGV[4], 'announced', ARGV[5])
return redis.call('XADD', KEYS[2], 'MAXLEN', '~', 1000, '*', 'name', ARGV[1], 'bytes', ARGV[2], 'sha256', ARGV[3], 'url', ARGV[4], 'announced', ARGV[5])
`);

function keys(connection: RedisConnection) {
  return {
    lock: connection.key('{snapshots}:lock'),
    current: connection.key('{snapshots}:current'),
    notices: connection.key('{snapshots}:notices'),
  };
}

/**
 * Runs `work` holding the builder lock; throws IprError build_locked when
 * another node holds it. The lock is renewed while `work` runs; should a
 * renewal find it lost (the store lost it, or this process stalled past
 * lockMs), `work` goes on but the loss is reported through `onLost`.
 */
export async function withBuilderLock<T>(
  connection: RedisConnection,
  work: () => Promise<T>,
  options: { lockMs?: number; onLost?: () => void } = {},
): Promise<T> {
  const { lock } = keys(connection);
  const lockMs = options.lockMs ?? BUILDER_LOCK_MS;
  const token = randomBytes(16).toString('hex');
  const taken = await connection.command<string | null>(lock, ['SET', lock, token, 'NX', 'PX', lockMs]);
  if (taken !== 'OK') throw new IprError('build_locked', `another node is building (the builder lock ${lock} is held)`);
  let lost = false;
  const timer = setInterval(() => {
    connection.script<number>(RENEW, [lock], [token, lockMs]).then(
      (renewed) => {
        if (renewed === 0 && !lost) {
          lost = true;
          options.onLost?.();
        }
      },
      () => undefined, // the store did not answer: try again at the next renewal
    );
  }, Math.max(10, Math.floor(lockMs / 3)));
  try {
    return await work();
  } finally {
    clearInterval(timer);
    await connection.script(RELEASE, [lock], [token]).catch(() => undefined);
  }
}

/** Size and SHA-256 of a file, read as a stream. */
export async function fileDigest(file: string): Promise<{ bytes: number; sha256: string }> {
  const hash = createHash('sha256');
  let bytes = 0;
  for await (const chunk of createReadStream(file)) {
    hash.update(chunk as Buffer);
    bytes += (chunk as Buffer).length;
  }
  return { bytes, sha256: hash.digest('hex') };
}

/**
 * Announces the snapshot published in `dataDir` to the followers, to be
 * downloaded from `baseUrl` (the builder's admin port, e.g.
 * http://10.0.0.5:9090): resolves the notice.
 */
export async function announcePublished(connection: RedisConnection, dataDir: string, baseUrl: string): Promise<SnapshotNotice> {
  const name = publishedName(dataDir);
  if (name === null) throw new IprError('snapshot_missing', `${snapshotsDir(dataDir)}: no snapshot is published`);
  const { bytes, sha256 } = await fileDigest(path.join(snapshotsDir(dataDir), name));
  const notice: SnapshotNotice = { name, bytes, sha256, url: `${baseUrl.replace(/\/$/, '')}/snapshots/${name}`, announced: new Date().toISOString() };
  await announce(connection, notice);
  return notice;
}

/** Writes a notice (the current snapshot and a stream entry) as is. */
export async function announce(connection: RedisConnection, notice: SnapshotNotice): Promise<void> {
  const k = keys(connection);
  await connection.script(ANNOUNCE, [k.current, k.notices], [notice.name, notice.bytes, notice.sha256, notice.url, notice.announced]);
}

function noticeOf(flat: string[]): SnapshotNotice | null {
  const f = new Map<string, string>();
  for (let i = 0; i + 1 < flat.length; i += 2) f.set(flat[i]!, flat[i + 1]!);
  const name = f.get('name');
  const sha256 = f.get('sha256');
  const url = f.get('url');
  if (name === undefined || sha256 === undefined || url === undefined || !SNAPSHOT_PATTERN.test(name) || !/^[0-9a-f]{64}$/.test(sha256)) return null;
  return { name, bytes: Number(f.get('bytes')), sha256, url, announced: f.get('announced') ?? '' };
}

/** The snapshot announced last, or null. */
export async function currentNotice(connection: RedisConnection): Promise<SnapshotNotice | null> {
  const { current } = keys(connection);
  return noticeOf(await connection.command<string[]>(current, ['HGETALL', current]));
}

/**
 * The admin port's handler for `GET /snapshots/<name>`: streams a snapshot
 * file of `dataDir` (only names of published-snapshot form, only files that
 * exist). Answers true when the request was for it. The caller has checked
 * the admin token.
 */
export function serveSnapshotFile(dataDir: string, req: IncomingMessage, res: ServerResponse): boolean {
  const match = /^\/snapshots\/([^/?]+)$/.exec((req.url ?? '').split('?')[0]!);
  if (match === null) return false;
  const name = match[1]!;
  const file = path.join(snapshotsDir(dataDir), name);
  if (!SNAPSHOT_PATTERN.test(name) || !existsSync(file)) {
    res.writeHead(404, { 'content-type': 'application/json; charset=utf-8' }).end(JSON.stringify({ error: 'not_found', message: 'No such snapshot', details: {} }));
    return true;
  }
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(statSync(file).size), 'cache-control': 'no-store' });
  if (req.method === 'HEAD') {
    res.end();
    return true;
  }
  createReadStream(file).pipe(res);
  return true;
}

export type FetchOutcome = { result: 'published' | 'current'; name: string } | { result: 'refused'; name: string; reason: string };

/**
 * Downloads the snapshot of `notice` into `dataDir` and publishes it, unless
 * it is published there already. Never publishes a file whose size or
 * SHA-256 differs from the notice's; on any failure the partial file is
 * removed and the published snapshot stays. `token`: the builder's admin
 * token, sent as a Bearer token.
 */
export async function fetchSnapshot(dataDir: string, notice: SnapshotNotice, options: { token?: string | null; timeoutMs?: number } = {}): Promise<FetchOutcome> {
  if (publishedName(dataDir) === notice.name) return { result: 'current', name: notice.name };
  const final = path.join(snapshotsDir(dataDir), notice.name);
  const partial = partialPath(final);
  const refuse = (reason: string): FetchOutcome => {
    rmSync(partial, { force: true });
    return { result: 'refused', name: notice.name, reason };
  };
  try {
    const response = await fetch(notice.url, {
      headers: options.token ? { authorization: `Bearer ${options.token}` } : {},
      signal: AbortSignal.timeout(options.timeoutMs ?? 600_000),
    });
    if (response.status !== 200 || response.body === null) return refuse(`${notice.url} answered ${response.status}`);
    const hash = createHash('sha256');
    let bytes = 0;
    const counted = async function* (source: AsyncIterable<Uint8Array>) {
      for await (const chunk of source) {
        bytes += chunk.length;
        if (bytes > notice.bytes) throw new IprError('snapshot_refused', `${notice.url}: more than the announced ${notice.bytes} bytes`);
        hash.update(chunk);
        yield chunk;
      }
    };
    await pipeline(response.body as unknown as AsyncIterable<Uint8Array>, counted, createWriteStream(partial));
    if (bytes !== notice.bytes) return refuse(`${notice.url}: ${bytes} bytes, ${notice.bytes} announced`);
    const sha256 = hash.digest('hex');
    if (sha256 !== notice.sha256) return refuse(`${notice.url}: SHA-256 ${sha256}, ${notice.sha256} announced`);
    const fd = openSync(partial, 'r');
    try {
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(partial, final);
    publish(dataDir, final);
    return { result: 'published', name: notice.name };
  } catch (error) {
    return refuse(`${notice.url}: ${(error as Error).message}`);
  }
}

export interface SnapshotFollower {
  /** The last outcome (null before the first announcement). */
  readonly last: FetchOutcome | null;
  close(): Promise<void>;
}

/**
 * Follows the builder's announcements: fetches the current one at start,
 * then each new one, one at a time. `onOutcome` hears every outcome (log
 * it: a refusal says why the previous snapshot keeps serving).
 */
export async function followSnapshots(
  connection: RedisConnection,
  dataDir: string,
  options: { token?: string | null; onOutcome?: (outcome: FetchOutcome) => void; onError?: (error: unknown) => void } = {},
): Promise<SnapshotFollower> {
  const k = keys(connection);
  let last: FetchOutcome | null = null;
  let closed = false;
  let reader: RedisConnection | null = null;
  let position = '$';
  const handle = async (notice: SnapshotNotice | null) => {
    if (notice === null) return;
    last = await fetchSnapshot(dataDir, notice, { token: options.token });
    options.onOutcome?.(last);
  };
  const run = async () => {
    while (!closed) {
      try {
        if (reader === null) {
          reader = await connection.duplicate('ipr-snapshot-follower');
          // From the stream's end, after reading the current announcement: nothing is missed between the two.
          const info = await reader.command<unknown[]>(k.notices, ['XINFO', 'STREAM', k.notices]).catch(() => null);
          const at = info === null ? -1 : info.indexOf('last-generated-id');
          position = at < 0 ? '0-0' : String(info![at + 1]);
          await handle(await currentNotice(reader));
        }
        type Reply = [string, [string, string[]][]][] | null;
        const reply = await reader.command<Reply>(k.notices, ['XREAD', 'COUNT', 10, 'BLOCK', 2000, 'STREAMS', k.notices, position], 2000 + connection.commandTimeoutMs);
        const entries = reply?.[0]?.[1] ?? [];
        if (entries.length > 0) {
          position = entries[entries.length - 1]![0];
          // Only the newest matters: an older snapshot announced meanwhile need not be fetched.
          await handle(noticeOf(entries[entries.length - 1]![1]));
        }
      } catch (error) {
        if (!closed) options.onError?.(error);
        reader?.destroy();
        reader = null;
        if (!closed) await new Promise((resolve) => setTimeout(resolve, 500));
      }
    }
  };
  const running = run();
  return {
    get last() {
      return last;
    },
    async close() {
      closed = true;
      reader?.destroy();
      reader = null;
      await running;
    },
  };
}
