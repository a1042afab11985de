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

/**
 * The sign-in limits of the dashboard (dashboard/sign-in-limits.ts), as a
 * store applies them: counted per account and client, per client over every
 * account, and the failures of an account, in windows of `windowMs`.
 */
export interface SignInRules {
  windowMs: number;
  /** Attempts of one client on one account in a window before it is refused. */
  maxPerAccountAndClient: number;
  /** Attempts of one client over every account in a window before it is refused. */
  maxPerClient: number;
  /** Failures of an account in a window from which its attempts wait (1 s, doubling). */
  slowFromFailures: number;
  /** The longest wait; a turn further away is refused. */
  maxWaitMs: number;
}

/** A sign-in attempt counted (then it waits `waitMs` before its password is checked), or refused for `refusedMs`. */
export type SignInAdmission = { waitMs: number } | { refusedMs: number };

/** A key's requests today and its last use, as the dashboard and `ipr keys list` show them. */
export interface KeyToday {
  requests: number;
  lastUsed: string | null;
}

/**
 * What a server counted for keys so far (its live limit counters,
 * server/limits.ts), by slot: the LMDB store adds it to what it holds, so
 * the dashboard shows a call at once.
 */
export interface LiveCounters {
  /** Slots from here on have no counters. */
  maxKeys: number;
  /** A slot's counts: the key they belong to (null: none), the current day (a Unix day) and its count, last use in Unix ms (0: never). */
  readKey(slot: number): { id: number | null; day: number; requests: number; lastUsedMs: number };
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
  /** Suspending also ends every dashboard session of the account, for good. Throws IprError account_missing. */
  setStatus(email: string, status: AccountStatus): Promise<Account>;
  /** Sets a new password (checked by passwords.ts) and ends every dashboard session of the account. Throws account_missing, invalid_argument. */
  setPassword(email: string, password: string): Promise<Account>;
  /** Ends every dashboard session of the account (its sessionGeneration moves on). Throws account_missing. */
  endSessions(email: string): Promise<Account>;

  /**
   * Creates a key; the key itself is in this answer and never again. Throws
   * account_missing, invalid_argument, and on a store with key slots
   * (LMDB: the limit table of its one node) key_slots_full when no more
   * than `reserve` slots would be left.
   */
  createKey(email: string, name: string, allowed?: string[], reserve?: number): Promise<{ key: string; record: KeyRecord }>;
  /**
   * Creates keys named `names` as createKey does one. LMDB makes them all
   * or none (one transaction); Redis one after another, so a failure part
   * way leaves the keys made before it (the answer is lost with the
   * failure: the operator revokes them from `keys list`).
   */
  createKeys(email: string, names: string[], allowed?: string[], reserve?: number): Promise<{ key: string; record: KeyRecord }[]>;
  /** The size of the limit table keys take slots of; null: this store gives keys no slots (Redis: each node maps keys to its own table). */
  keySlots(): Promise<number | null>;
  /** Counts a refused creation (a key without a slot, over a daily cap...), for the admin port's metrics. */
  countRefusal(reason: string): Promise<void>;
  /** Refusals counted by countRefusal, by reason. */
  refusals(): Promise<Map<string, number>>;
  keyByDigest(digest: string): Promise<KeyRecord | undefined>;
  /** The account's keys, revoked ones included, oldest first. */
  listKeys(email: string): Promise<KeyRecord[]>;
  /** Revokes a key of the account, at once and for good. Throws key_missing (also for another account's key). */
  revokeKey(email: string, prefix: string): Promise<KeyRecord>;
  setAllowed(email: string, prefix: string, allowed: string[]): Promise<KeyRecord>;

  /** Daily counts of a key from `fromDay` to `toDay` inclusive, oldest first, days without requests left out. */
  usageRange(key: Pick<KeyRecord, 'id' | 'account'>, fromDay: string, toDay: string): Promise<DayUsage[]>;
  /**
   * The key's requests on the UTC day of `nowMs` and its last use, the
   * freshest this store knows: LMDB adds the live counters of its server
   * (when it was given them) to what the server wrote; Redis has what the
   * lease scripts of every node wrote.
   */
  keyToday(key: KeyRecord, nowMs: number): Promise<KeyToday>;

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

  /**
   * A sign-in attempt of `client` on `account`, counted before its password
   * is checked, in one atomic step over the account's counters (on the
   * store's clock, as countAttempt): admitted after a wait, or refused.
   */
  admitSignIn(account: string, client: string, rules: SignInRules, nowMs: number): Promise<SignInAdmission>;
  /** A wrong password: one more failure of the account. */
  signInFailed(account: string, rules: SignInRules, nowMs: number): Promise<void>;
  /** The right password: the client's count on the account is cleared, its attempt over every account taken back. */
  signInSucceeded(account: string, client: string): Promise<void>;
  /**
   * Removes the sessions `expired` says are over (it gets the session's
   * account, undefined when gone) and the attempt windows that have ended;
   * resolves with how many. Redis ends both by TTL and removes nothing here.
   */
  pruneDashboardState(expired: (session: Session, account: Account | undefined) => boolean, nowMs: number): Promise<number>;

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
