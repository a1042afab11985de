/**
 * What the server, the dashboard and the CLI need from a customer store,
 * whichever store serves them: the embedded LMDB store of one data folder
 * (accounts.ts) or Redis shared by many nodes (redis.ts).
 *
 * Two views:
 *
 * - `CustomerStore`, asynchronous: accounts, keys, sessions, sign-in
 *   attempts, usage, and the feed of changes. Used off the request path
 *   (dashboard routes, CLI commands, the server's main thread).
 * - `KeyDirectory`, synchronous: what the request path reads to authorise a
 *   key, never waiting on a network. The LMDB store is one itself; with
 *   Redis, each node keeps one up to date from the change feed.
 */
import type { Account, AccountStatus, KeyRecord, Session } from './accounts.js';

export type { Account, AccountStatus, KeyRecord, Session };

/** One limit of `countAttempt`: at most `max` attempts named `name` in a window of `windowMs`. */
export interface AttemptLimit {
  name: string;
  max: number;
  windowMs: number;
}

/** Requests of one key on one UTC day (YYYY-MM-DD). */
export interface DayUsage {
  day: string;
  requests: number;
}

/**
 * A change that can alter an answer, as the change feed carries it. It says
 * what changed, never the new state: a node reads that from the store, so
 * that changes applied in another order than they were announced still end
 * in the store's state.
 */
export type Change =
  | { type: 'key-created' | 'key-revoked' | 'key-allowed'; account: string; key: number; digest: string }
  | { type: 'account-created' | 'account-plan' | 'account-status'; account: string };

export interface ChangeFeedHandlers {
  /** A change made anywhere (this node included), in the order the feed holds them. */
  change(change: Change): void | Promise<void>;
  /**
   * The feed cannot say what changed since the last change seen (it was
   * trimmed past it, or the store lost it): everything may have changed, read
   * it all again.
   */
  resync(): void | Promise<void>;
}

export interface ChangeFollower {
  /** The position of the last change handled: pass it as `from` to go on from there after a restart. */
  readonly position: string | null;
  /** Whether the follower is reading the feed now (false while the store cannot be reached). */
  readonly connected: boolean;
  close(): Promise<void>;
}

export interface CustomerStore {
  /** Which store this is, for logs and metrics. */
  readonly kind: 'lmdb' | 'redis';

  account(email: string): Promise<Account | undefined>;
  /** Every account, by email. */
  listAccounts(): Promise<Account[]>;
  /** Throws IprError account_exists. */
  createAccount(email: string, password: string, plan: string): Promise<Account>;
  /** The account when the password is right, else undefined (the same work either way). */
  verifyPassword(email: string, password: string): Promise<Account | undefined>;
  /** Throws IprError account_missing. */
  setPlan(email: string, plan: string): Promise<Account>;
  /** Throws IprError account_missing. */
  setStatus(email: string, status: AccountStatus): Promise<Account>;

  /** Creates a key; the key itself is in this answer and never again. Throws account_missing, invalid_argument. */
  createKey(email: string, name: string, allowed?: string[]): Promise<{ key: string; record: KeyRecord }>;
  keyByDigest(digest: string): Promise<KeyRecord | undefined>;
  /** The account's keys, revoked ones included, oldest first. */
  listKeys(email: string): Promise<KeyRecord[]>;
  /** Revokes a key of the account, at once and for good. Throws key_missing (also for another account's key). */
  revokeKey(email: string, prefix: string): Promise<KeyRecord>;
  setAllowed(email: string, prefix: string, allowed: string[]): Promise<KeyRecord>;

  /** Daily counts of a key from `fromDay` to `toDay` inclusive, oldest first, days without requests left out. */
  usageRange(key: Pick<KeyRecord, 'id' | 'account'>, fromDay: string, toDay: string): Promise<DayUsage[]>;

  /** Stores a new session under a fresh random id; it ends by itself `ttlMs` after its last touch. */
  createSession(session: Session, ttlMs: number): Promise<string>;
  session(id: string): Promise<Session | undefined>;
  /** Records a later `seen`; the session now ends `ttlMs` after it. */
  touchSession(id: string, session: Session, seen: number, ttlMs: number): Promise<void>;
  endSession(id: string): Promise<void>;

  /**
   * Counts one attempt under each name unless one of them has reached its
   * `max`: then nothing is counted and the answer is the ms until that
   * window ends; 0 means counted. Windows are on the store's clock: `nowMs`
   * for LMDB, the Redis server's TIME for Redis (so nodes whose clocks differ
   * agree).
   */
  countAttempt(limits: AttemptLimit[], nowMs: number): Promise<number>;
  /** Takes back one attempt counted under `name`, or all of them when `all`. */
  forgetAttempt(name: string, all?: boolean): Promise<void>;

  /** Follows the changes made from `from` (a `position`; null: from now on). */
  follow(from: string | null, handlers: ChangeFeedHandlers): Promise<ChangeFollower>;

  close(): Promise<void>;
}

/**
 * What the request path reads, synchronously, to authorise a key. `changeCount`
 * moves whenever anything it answers may have changed; the request path
 * drops what it cached when it does.
 */
export interface KeyDirectory {
  changeCount(): number;
  keyByDigest(digest: string): KeyRecord | undefined;
  account(email: string): Account | undefined;
}
