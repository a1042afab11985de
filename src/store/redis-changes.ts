/**
 * The change stream of the Redis customer store: every change that can alter
 * an answer (a key created, revoked or given other allowed addresses; an
 * account created, moved to another plan, suspended or reactivated) is one
 * atomic write in the account's hash slot followed by an entry in one Redis
 * Stream, `<prefix>{changes}`, which every node follows with a blocking
 * XREAD.
 *
 * Stream entries: fields `type`, `account` (the email), and for key changes
 * `key` (the key id) and `digest` (its SHA-256). An entry says what changed,
 * not the new state: followers read that from the store.
 *
 * The write and the entry live in different hash slots, so on a Cluster no
 * single command can make both. A writer that dies between them (or whose
 * store stalled past the command time limit, the write landing later) must
 * not lose the entry: a lost revocation would keep a revoked key working on
 * every node. Hence a write-ahead outbox:
 *
 *   1. ZADD <prefix>{outbox} <now> "<account tag>|<change id>"  before anything
 *   2. the atomic write, which also RPUSHes the change to the account's
 *      `unpublished` list (same slot, same script)
 *   3. XADD the entry
 *   4. LREM it from `unpublished`, then ZREM the outbox member
 *
 * Any node's follower sweeps outbox members older than a grace period:
 * changes still in `unpublished` are added to the stream (an entry twice is
 * harmless: entries are "read again" notices), and the member removed.
 *
 * Followers remember the id of the last entry handled. After a reconnect they
 * read on from there and get what they missed. When the stream no longer
 * holds everything after it (trimmed past it, or the store lost data and its
 * ids went back), they resync: read everything again, then follow from the
 * stream's last id. The stream keeps about STREAM_LENGTH entries: a node
 * away for that many changes resyncs.
 */
import { randomBytes } from 'node:crypto';
import type { Change, ChangeFeedHandlers, ChangeFollower } from './types.js';
import type { RedisConnection } from './redis-connection.js';

/** Entries kept in the stream (approximately: trimmed with MAXLEN ~). */
export const STREAM_LENGTH = 100_000;
/** How long a blocking read waits for an entry before it is sent again. */
const BLOCK_MS = 2000;
/** An outbox member this old belongs to a writer that died or gave up. */
export const OUTBOX_GRACE_MS = 30_000;
const SWEEP_EVERY_MS = 10_000;
const RECONNECT_MAX_MS = 1000;

export function streamKey(connection: RedisConnection): string {
  return connection.key('{changes}');
}

export function outboxKey(connection: RedisConnection): string {
  return connection.key('{outbox}');
}

/** A change as written to `unpublished`: the change and the id of its outbox member. */
export interface PendingChange {
  id: string;
  change: Change;
}

export function newChangeId(): string {
  return randomBytes(9).toString('base64url');
}

function streamFields(change: Change): string[] {
  const fields = ['type', change.type, 'account', change.account];
  if ('key' in change) fields.push('key', String(change.key), 'digest', change.digest);
  return fields;
}

function changeOf(fields: string[]): Change | null {
  const f = new Map<string, string>();
  for (let i = 0; i + 1 < fields.length; i += 2) f.set(fields[i]!, fields[i + 1]!);
  const type = f.get('type');
  const account = f.get('account');
  if (type === undefined || account === undefined) return null;
  if (type === 'key-created' || type === 'key-revoked' || type === 'key-allowed') {
    const key = Number(f.get('key'));
    const digest = f.get('digest');
    return Number.isInteger(key) && digest !== undefined ? { type, account, key, digest } : null;
  }
  if (type === 'account-created' || type === 'account-plan' || type === 'account-status') return { type, account };
  return null;
}

/** Adds the entry of `change` to the stream; resolves its id. */
export function addToStream(connection: RedisConnection, change: Change): Promise<string> {
  const key = streamKey(connection);
  return connection.command<string>(key, ['XADD', key, 'MAXLEN', '~', STREAM_LENGTH, '*', ...streamFields(change)]);
}

/** Stream ids compare as (ms, sequence). */
export function compareIds(a: string, b: string): number {
  const [am, as] = a.split('-').map(BigInt) as [bigint, bigint];
  const [bm, bs] = b.split('-').map(BigInt) as [bigint, bigint];
  return am === bm ? (as === bs ? 0 : as < bs ? -1 : 1) : am < bm ? -1 : 1;
}

/**
 * Publishes the changes left in the outbox by writers that did not finish
 * (members older than `graceMs`). `unpublished(tag)` names the account's
 * list. Resolves how many changes it added to the stream.
 */
export async function sweepOutbox(connection: RedisConnection, unpublished: (tag: string) => string, graceMs = OUTBOX_GRACE_MS): Promise<number> {
  const outbox = outboxKey(connection);
  const now = await connection.time(outbox);
  const members = await connection.command<string[]>(outbox, ['ZRANGEBYSCORE', outbox, '-inf', Math.floor(now - graceMs), 'LIMIT', 0, 100]);
  let published = 0;
  for (const member of members) {
    const bar = member.lastIndexOf('|');
    const list = unpublished(member.slice(0, bar));
    const id = member.slice(bar + 1);
    for (const text of await connection.command<string[]>(list, ['LRANGE', list, 0, -1])) {
      const pending = JSON.parse(text) as PendingChange;
      if (pending.id !== id) continue;
      await addToStream(connection, pending.change);
      await connection.command(list, ['LREM', list, 1, text]);
      published++;
    }
    await connection.command(outbox, ['ZREM', outbox, member]);
  }
  return published;
}

type XReadReply = [string, [string, string[]][]][] | null;

/**
 * Follows the stream from `from` (null: from its end). Handlers run one at a
 * time, in stream order; the position moves past an entry once its handler
 * has finished, so an entry whose handler threw is handled again.
 */
export async function followStream(
  connection: RedisConnection,
  from: string | null,
  handlers: ChangeFeedHandlers,
  options: { unpublished: (tag: string) => string; sweepGraceMs?: number; onError?: (error: unknown) => void },
): Promise<ChangeFollower> {
  const key = streamKey(connection);
  let position = from;
  let reader: RedisConnection | null = null;
  let connected = false;
  let closed = false;
  let wake: (() => void) | null = null;
  const pause = (ms: number) =>
    new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });

  /**
   * Where reading goes on after a (re)connect; resyncs when the stream cannot
   * say what was missed. Trimming removes the oldest entries first, so while
   * the entry at the position is still there, everything after it is too.
   */
  const resume = async (conn: RedisConnection) => {
    const info = new Map<string, unknown>();
    if ((await conn.command<number>(key, ['EXISTS', key])) === 1) {
      const flat = await conn.command<unknown[]>(key, ['XINFO', 'STREAM', key]);
      for (let i = 0; i + 1 < flat.length; i += 2) info.set(String(flat[i]), flat[i + 1]);
    }
    const last = String(info.get('last-generated-id') ?? '0-0');
    if (position === null) {
      position = last;
      return;
    }
    let missed: boolean;
    if (info.size === 0) missed = position !== '0-0'; // the stream is gone: the store lost its data
    else if (compareIds(position, last) > 0) missed = true; // the store went back (restored from an older copy)
    else if (position === '0-0') missed = Number(info.get('entries-added')) > Number(info.get('length'));
    else missed = (await conn.command<unknown[]>(key, ['XRANGE', key, position, position])).length === 0;
    if (missed) {
      position = last;
      await handlers.resync();
    }
  };

  const run = async () => {
    let failures = 0;
    let lastSweep = 0;
    while (!closed) {
      try {
        if (reader === null) {
          reader = await connection.duplicate('ipr-change-follower');
          await resume(reader);
          connected = true;
          failures = 0;
        }
        if (Date.now() - lastSweep >= SWEEP_EVERY_MS) {
          lastSweep = Date.now();
          await sweepOutbox(connection, options.unpublished, options.sweepGraceMs);
        }
        const reply = await reader.command<XReadReply>(key, ['XREAD', 'COUNT', 100, 'BLOCK', BLOCK_MS, 'STREAMS', key, position!], BLOCK_MS + connection.commandTimeoutMs);
        for (const [, entries] of reply ?? []) {
          for (const [id, fields] of entries) {
            const change = changeOf(fields);
            if (change !== null) await handlers.change(change);
            position = id;
          }
        }
      } catch (error) {
        connected = false;
        if (!closed) options.onError?.(error);
        const stale = reader;
        reader = null;
        // A connection that timed out may still hold a blocking read: drop it.
        stale?.destroy();
        failures++;
        if (!closed) await pause(Math.min(50 * 2 ** failures, RECONNECT_MAX_MS));
      }
    }
  };
  const running = run();
  return {
    get position() {
      return position;
    },
    get connected() {
      return connected;
    },
    async close() {
      closed = true;
      wake?.();
      reader?.destroy();
      reader = null;
      await running;
    },
  };
}
