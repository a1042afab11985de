/**
 * Accounts and API keys, in an LMDB environment of their own (lmdb-js) under
 * <data>/accounts: the server, the `ipr accounts`/`ipr keys` commands and the
 * dashboard all open it, from any number of processes.
 *
 * Keys are `ipr_` and 43 URL-safe characters (32 random bytes); only their
 * SHA-256 digest is stored, and keys are found by digest, so a lookup's
 * timing says nothing about the key. The first 8 characters, the "prefix",
 * are unique and shown in lists. Passwords are stored as scrypt hashes
 * (passwords.ts).
 *
 * Every change that can alter an authorisation decision (a key created or
 * revoked, an account suspended or moved to another plan, allowed addresses)
 * bumps a counter shared by every process that opens the store (a mapped
 * file beside it, native/src/change_counter.h) once its transaction has
 * committed; servers compare it on each request (one load, no read of the
 * store) and drop what they cached, so such a change takes effect at once.
 *
 * The dashboard's sessions and sign-in attempt counters live here too, so
 * that every worker thread and process sees the same ones. Their writes are
 * asynchronous (lmdb-js commits them off the calling thread): a worker
 * answering the API never waits for a dashboard's disk sync.
 */
import { createHash, randomBytes } from 'node:crypto';
import path from 'node:path';
import { open, type Database, type RootDatabase } from 'lmdb';
import { IprError } from '../errors.js';
import { native } from '../native.js';
import { normaliseAllowed } from './allowed.js';
import { hasControlOrFormat } from '../text.js';
import { normaliseEmail } from './emails.js';
import { hashPassword, passwordMatches } from './passwords.js';
import { PRIVATE_FILE_MODE, privateDir, privateFilesIn, tightenedToStderr, type OnTightened } from '../private-files.js';

export const KEY_TAG = 'ipr_';
export const PREFIX_LENGTH = 8;

export type AccountStatus = 'active' | 'suspended';

export interface Account {
  email: string;
  passwordHash: string;
  plan: string;
  status: AccountStatus;
  created: string;
  /**
   * Sessions are valid only while they carry this number; bumped to end
   * every session of the account (suspension, sign out everywhere, a new
   * password). Absent in accounts stored before it: 0.
   */
  sessionGeneration?: number;
}

/** A key, as every customer store holds it (types.ts). */
export interface KeyRecord {
  /** Sequential, never reused: what the key's usage is stored under. */
  id: number;
  account: string;
  name: string;
  prefix: string;
  /** SHA-256 of the key, hex. */
  hash: string;
  created: string;
  lastUsed: string | null;
  revoked: string | null;
  /** CIDR prefixes the key may be used from; empty: anywhere. */
  allowed: string[];
}

/**
 * A key as this store holds it: with its place in the limit table of the
 * one node that serves this data folder. Not a customer fact (the Redis
 * store, shared by nodes that each have their own table, has none).
 */
export interface SlottedKeyRecord extends KeyRecord {
  /**
   * The key's slot in the server's shared limit table, below keySlots().
   * Given back when the key is revoked and then reused by a new key (the
   * limit table tells keys apart by id: limits.ts).
   */
  slot: number;
}

/** A signed-in dashboard session, stored under the SHA-256 of its id (the id itself is never stored). */
export interface Session {
  account: string;
  /** Sent back by the dashboard's pages in a header with every change (CSRF). */
  csrf: string;
  /** Unix ms. */
  created: number;
  /** Unix ms of the last request seen, updated at most once a minute. */
  seen: number;
  /** The account's sessionGeneration when the session began (absent: 0). */
  generation?: number;
}

/** Attempts counted under one name (see countAttempt) in a fixed window. */
export interface AttemptCount {
  count: number;
  /** Unix ms at which the window ends. */
  ends: number;
  /** For the sign-in limits of an account: Unix ms of its next free turn (dashboard/sign-in-limits.ts). */
  turn?: number;
}

/**
 * The count `c` as it stands at `nowMs` in windows of `windowMs`: a new,
 * empty window when there is none or it has ended (a window begins at the
 * first attempt after the last one ended).
 */
export function inWindow(c: AttemptCount | undefined, nowMs: number, windowMs: number): AttemptCount {
  return c === undefined || nowMs >= c.ends || c.ends - nowMs > windowMs ? { count: 0, ends: nowMs + windowMs } : c;
}

/**
 * The folder of a data folder's store: `accounts` holds the node's own
 * customers; `replica` the copy of a shared store's that a node serving
 * from Redis keeps (server/replica.ts), apart so that no command ever takes
 * one for the other.
 */
export type StoreFolder = 'accounts' | 'replica';

/** The limit table's size unless `ipr serve --max-keys` said otherwise. */
export const DEFAULT_KEY_SLOTS = 1 << 20;

/** `account` with its session generation moved on: every session it had is over. */
function endingSessions(account: Account): Account {
  return { ...account, sessionGeneration: (account.sessionGeneration ?? 0) + 1 };
}

/** A key's name as stored: trimmed, 1 to 100 characters of what people type; else IprError invalid_argument. */
export function keyName(name: string): string {
  const trimmed = name.trim();
  if (trimmed.length === 0 || trimmed.length > 100) throw new IprError('invalid_argument', 'a key needs a name of 1 to 100 characters');
  // Names are printed in the operator's terminal (ipr keys list) and shown in pages: only what people type.
  if (hasControlOrFormat(trimmed)) throw new IprError('invalid_argument', 'a key name cannot hold control or format characters');
  return trimmed;
}

/** UTC day as YYYY-MM-DD. */
export function dayOf(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

/** SHA-256, hex: how keys and session ids are stored. */
export function keyDigest(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

export class AccountStore {
  readonly #root: RootDatabase;
  readonly #accounts: Database<Account, string>;
  readonly #keys: Database<SlottedKeyRecord, string>;
  readonly #keyIds: Database<string, number>;
  readonly #prefixes: Database<number, string>;
  readonly #accountKeys: Database<number, string>;
  readonly #usage: Database<number, [number, string]>;
  readonly #meta: Database<number, string>;
  readonly #sessions: Database<Session, string>;
  readonly #attempts: Database<AttemptCount, string>;
  /** Slots below `nextSlot` not held by an active key, lowest first. */
  readonly #freeSlots: Database<true, number>;
  readonly #changes: ArrayBuffer;
  readonly #changeCount: Uint32Array;

  /**
   * Opens (or makes) the store of `dataDir`: its own customers in
   * `accounts`, or in `replica` a copy of a shared store's (mirrorAccount).
   * It holds password hashes and
   * customer data: its folder is made 0700 and its files 0600, and looser
   * ones left by an older version are tightened, each reported to `onTightened`.
   */
  constructor(dataDir: string, onTightened: OnTightened = tightenedToStderr, folder: StoreFolder = 'accounts') {
    const dir = path.join(dataDir, folder);
    privateDir(dir, onTightened);
    // permissionsMode: lmdb-js creates data.mdb and lock.mdb with it (its default is 0664).
    this.#root = open({ path: dir, maxDbs: 16, permissionsMode: PRIVATE_FILE_MODE } as Parameters<typeof open>[0]);
    privateFilesIn(dir, onTightened);
    this.#accounts = this.#root.openDB({ name: 'accounts' });
    this.#keys = this.#root.openDB({ name: 'keys' });
    this.#keyIds = this.#root.openDB({ name: 'keyIds' });
    this.#prefixes = this.#root.openDB({ name: 'prefixes' });
    this.#accountKeys = this.#root.openDB({ name: 'accountKeys', dupSort: true });
    this.#usage = this.#root.openDB({ name: 'usage' });
    this.#meta = this.#root.openDB({ name: 'meta' });
    this.#sessions = this.#root.openDB({ name: 'sessions' });
    this.#attempts = this.#root.openDB({ name: 'signInAttempts' });
    this.#freeSlots = this.#root.openDB({ name: 'freeSlots' });
    this.#changes = native.mapChangeCounter(path.join(dir, 'changes'));
    this.#changeCount = new Uint32Array(this.#changes, 0, 1);
    this.#giveKeysSlots();
  }

  /**
   * Moves whenever a change that can alter an authorisation decision has
   * committed, in any process: read it before reading what it guards.
   */
  changeCount(): number {
    return Atomics.load(this.#changeCount, 0);
  }

  /**
   * Makes the next read see every committed change. lmdb-js keeps a read
   * transaction until a timer of the thread's event loop ends it; a reader
   * that has just seen changeCount() move must not wait for that timer.
   */
  readFresh(): void {
    this.#root.resetReadTxn();
  }

  /** Keys issued so far have ids below this. */
  nextKeyId(): number {
    return this.#meta.get('nextKeyId') ?? 0;
  }

  /**
   * Once, on a store made before slots: every key takes the slot of its id
   * (what the limit table used), and revoked keys give theirs back.
   */
  #giveKeysSlots(): void {
    if (this.#meta.get('nextSlot') !== undefined || this.nextKeyId() === 0) return;
    this.#root.transactionSync(() => {
      if (this.#meta.get('nextSlot') !== undefined) return; // another process did it
      for (const { key, value } of this.#keys.getRange()) {
        if (value.slot === undefined) this.#keys.putSync(key, { ...value, slot: value.id });
        if (value.revoked !== null) this.#freeSlots.putSync(value.id, true);
      }
      this.#meta.putSync('nextSlot', this.nextKeyId());
    });
  }

  /** The size of the limit table keys are given slots of: `ipr serve --max-keys`, remembered here. */
  keySlots(): number {
    return this.#meta.get('keySlots') ?? DEFAULT_KEY_SLOTS;
  }

  /** Slots handed out so far are below this (some of them may be free again). */
  nextSlot(): number {
    return this.#meta.get('nextSlot') ?? 0;
  }

  /** Slots held by active keys. */
  usedSlots(): number {
    return this.nextSlot() - this.#freeSlots.getCount();
  }

  /**
   * Sets the size of the limit table (`ipr serve --max-keys`). Refused when
   * an active key holds a slot at or past it: that key could not be served.
   */
  setKeySlots(size: number): void {
    this.#root.transactionSync(() => {
      const next = this.nextSlot();
      for (let slot = next - 1; slot >= size; slot--) {
        if (this.#freeSlots.get(slot) === undefined) {
          throw new IprError('invalid_argument', `--max-keys ${size}: an active key holds slot ${slot}; revoke keys, or keep at least ${slot + 1}`);
        }
        this.#freeSlots.removeSync(slot);
      }
      if (next > size) this.#meta.putSync('nextSlot', size);
      this.#meta.putSync('keySlots', size);
    });
  }

  /** Counts a refused creation (a key without a slot, over a daily cap...), for the admin port's metrics. */
  async countRefusal(reason: string): Promise<void> {
    await this.#root.transaction(() => this.#meta.put(`refused:${reason}`, (this.#meta.get(`refused:${reason}`) ?? 0) + 1));
  }

  /** Refusals counted by countRefusal, by reason. */
  refusals(): Map<string, number> {
    return new Map([...this.#meta.getRange({ start: 'refused:', end: 'refused;' })].map(({ key, value }) => [key.slice('refused:'.length), value]));
  }

  /** Takes a slot for a new key: the lowest free one, else the next new one; null when fewer than `reserve` + 1 are left. */
  #takeSlot(reserve: number): number | null {
    if (this.usedSlots() + reserve >= this.keySlots()) return null;
    for (const slot of this.#freeSlots.getKeys({ limit: 1 })) {
      this.#freeSlots.removeSync(slot);
      return slot;
    }
    const slot = this.nextSlot();
    this.#meta.putSync('nextSlot', slot + 1);
    return slot;
  }

  /** Runs `change` in a write transaction, then tells every process it committed. */
  #commitChange<T>(change: () => T): T {
    const result = this.#root.transactionSync(change);
    native.bumpChangeCounter(this.#changes);
    return result;
  }

  /**
   * The account of `email` in any form of it (emails.ts). An address the
   * current rules refuse is looked up as it is: an account stored before
   * them (named by a key or a session) is still found.
   */
  account(email: string): Account | undefined {
    let key: string;
    try {
      key = normaliseEmail(email);
    } catch {
      key = email;
    }
    return this.#accounts.get(key);
  }

  /** Every account, by email. */
  listAccounts(): Account[] {
    return [...this.#accounts.getRange()].map(({ value }) => value);
  }

  #requireAccount(email: string): Account {
    const account = this.account(email);
    if (!account) throw new IprError('account_missing', `no account ${normaliseEmail(email)}`);
    return account;
  }

  async createAccount(email: string, password: string, plan: string): Promise<Account> {
    const normal = normaliseEmail(email);
    const account: Account = { email: normal, passwordHash: await hashPassword(password), plan, status: 'active', created: new Date().toISOString() };
    const created = this.#root.transactionSync(() => {
      if (this.#accounts.get(normal)) return false;
      this.#accounts.putSync(normal, account);
      return true;
    });
    if (!created) throw new IprError('account_exists', `an account ${normal} exists`);
    return account;
  }

  /** The account when the password is right, else undefined (same work either way). */
  async verifyPassword(email: string, password: string): Promise<Account | undefined> {
    let account: Account | undefined;
    try {
      account = this.account(email);
    } catch {
      account = undefined;
    }
    const ok = await passwordMatches(password, account?.passwordHash);
    return ok ? account : undefined;
  }

  #updateAccount(email: string, change: (a: Account) => Account): Account {
    return this.#commitChange(() => {
      const updated = change(this.#requireAccount(email));
      this.#accounts.putSync(updated.email, updated);
      return updated;
    });
  }

  setPlan(email: string, plan: string): Account {
    return this.#updateAccount(email, (a) => ({ ...a, plan }));
  }

  /** Suspending an account ends its sessions for good: reactivating it does not bring them back. */
  setStatus(email: string, status: AccountStatus): Account {
    return this.#updateAccount(email, (a) => (status === 'suspended' ? endingSessions({ ...a, status }) : { ...a, status }));
  }

  /** Ends every dashboard session of the account. */
  endSessions(email: string): Account {
    return this.#updateAccount(email, endingSessions);
  }

  /** Sets a new password (checked by passwords.ts) and ends every dashboard session of the account. */
  async setPassword(email: string, password: string): Promise<Account> {
    const passwordHash = await hashPassword(password);
    return this.#updateAccount(email, (a) => endingSessions({ ...a, passwordHash }));
  }

  /**
   * Creates a key; the key itself is returned here and never again. It
   * takes a slot of the limit table: refused (key_slots_full) when none is
   * free, or when no more than `reserve` would be left (the dashboard keeps
   * some for the operator's CLI).
   */
  createKey(email: string, name: string, allowed: string[] = [], reserve = 0): { key: string; record: SlottedKeyRecord } {
    return this.createKeys(email, [name], allowed, reserve)[0]!;
  }

  /** Creates keys named `names`, all in one transaction (one sync, however many), as createKey does one. */
  createKeys(email: string, names: string[], allowed: string[] = [], reserve = 0): { key: string; record: SlottedKeyRecord }[] {
    const trimmed = names.map(keyName);
    const allowedList = normaliseAllowed(allowed);
    try {
      return this.#commitChange(() => trimmed.map((name) => this.#createKey(email, name, allowedList, reserve)));
    } catch (error) {
      if (error instanceof IprError && error.code === 'key_slots_full') void this.countRefusal('key_slots');
      throw error;
    }
  }

  /** One key of createKeys, inside its transaction. */
  #createKey(email: string, trimmed: string, allowedList: string[], reserve: number): { key: string; record: SlottedKeyRecord } {
    const account = this.#requireAccount(email);
    let key: string;
    do key = KEY_TAG + randomBytes(32).toString('base64url');
    while (this.#prefixes.get(key.slice(0, PREFIX_LENGTH)) !== undefined);
    const slot = this.#takeSlot(reserve);
    if (slot === null) {
      throw new IprError(
        'key_slots_full',
        reserve === 0
          ? `no key can be made: all ${this.keySlots()} key slots of this data folder are taken (revoke keys, or restart ipr serve with a larger --max-keys)`
          : 'This server cannot make more keys from the dashboard now; ask its operator.',
      );
    }
    const id = this.nextKeyId();
    const record: SlottedKeyRecord = {
      id,
      slot,
      account: account.email,
      name: trimmed,
      prefix: key.slice(0, PREFIX_LENGTH),
      hash: keyDigest(key),
      created: new Date().toISOString(),
      lastUsed: null,
      revoked: null,
      allowed: allowedList,
    };
    this.#keys.putSync(record.hash, record);
    this.#keyIds.putSync(id, record.hash);
    this.#prefixes.putSync(record.prefix, id);
    this.#accountKeys.putSync(account.email, id);
    this.#meta.putSync('nextKeyId', id + 1);
    return { key, record };
  }

  keyByDigest(digest: string): SlottedKeyRecord | undefined {
    return this.#keys.get(digest);
  }

  keyById(id: number): SlottedKeyRecord | undefined {
    const digest = this.#keyIds.get(id);
    return digest === undefined ? undefined : this.#keys.get(digest);
  }

  /** The account's keys, revoked ones included, oldest first. */
  listKeys(email: string): SlottedKeyRecord[] {
    const account = this.#requireAccount(email);
    return [...this.#accountKeys.getValues(account.email)]
      .map((id) => this.keyById(id))
      .filter((k): k is SlottedKeyRecord => k !== undefined)
      .sort((a, b) => a.id - b.id);
  }

  #updateKey(email: string, prefix: string, change: (k: SlottedKeyRecord) => SlottedKeyRecord): SlottedKeyRecord {
    return this.#commitChange(() => {
      const account = this.#requireAccount(email);
      const id = this.#prefixes.get(prefix);
      const record = id === undefined ? undefined : this.keyById(id);
      // Another account's key is "no such key" here: never confirm it exists.
      if (!record || record.account !== account.email) throw new IprError('key_missing', `no key ${prefix} in account ${account.email}`);
      const updated = change(record);
      this.#keys.putSync(updated.hash, updated);
      return updated;
    });
  }

  /** Revokes a key of the account, at once and for good; its slot is free for a new key. */
  revokeKey(email: string, prefix: string): SlottedKeyRecord {
    return this.#updateKey(email, prefix, (k) => {
      if (k.revoked) return k;
      this.#freeSlots.putSync(k.slot, true);
      return { ...k, revoked: new Date().toISOString() };
    });
  }

  /** Every active key. */
  activeKeys(): SlottedKeyRecord[] {
    return [...this.#keys.getRange()].map(({ value }) => value).filter((k) => k.revoked === null);
  }

  /**
   * Makes what this store holds of account `email` what another store holds
   * (a node's replica of Redis, server/replica.ts): the account (undefined:
   * gone) and its keys, in one transaction that bumps the change counter.
   * Keys keep their ids; an active key keeps its slot or takes one (the
   * table size, out of range, when none is free: the API answers 503 for it);
   * a key revoked or gone gives its slot back. Answers the slots given back.
   */
  mirrorAccount(email: string, account: Account | undefined, keys: KeyRecord[]): number[] {
    // Read before the transaction: lmdb-js misreads a dupSort range inside a write transaction
    // (a RangeError from ordered-binary). The replica is the folder's only writer.
    const held = [...this.#accountKeys.getValues(email)];
    return this.#commitChange(() => {
      const freed: number[] = [];
      const free = (k: SlottedKeyRecord) => {
        if (k.revoked === null && k.slot < this.keySlots()) {
          this.#freeSlots.putSync(k.slot, true);
          freed.push(k.slot);
        }
      };
      const upstream = new Map(keys.map((k) => [k.id, k]));
      for (const id of held) {
        const local = this.keyById(id);
        if (local !== undefined && upstream.has(id)) continue;
        if (local !== undefined) {
          free(local);
          this.#keys.removeSync(local.hash);
        }
        this.#keyIds.removeSync(id);
        this.#accountKeys.removeSync(email, id);
      }
      if (account === undefined) {
        this.#accounts.removeSync(email);
        return freed;
      }
      this.#accounts.putSync(email, account);
      for (const k of keys) {
        const local = this.keyById(k.id);
        let slot = local?.slot ?? this.keySlots();
        if (k.revoked !== null) {
          if (local !== undefined) free(local);
        } else if (local === undefined || local.revoked !== null || slot >= this.keySlots()) {
          slot = this.#takeSlot(0) ?? this.keySlots();
        }
        this.#keys.putSync(k.hash, { ...k, slot });
        this.#keyIds.putSync(k.id, k.hash);
        this.#accountKeys.putSync(email, k.id);
      }
      return freed;
    });
  }

  setAllowed(email: string, prefix: string, allowed: string[]): SlottedKeyRecord {
    const list = normaliseAllowed(allowed);
    return this.#updateKey(email, prefix, (k) => ({ ...k, allowed: list }));
  }

  /** Requests counted for key `id` on `day` (YYYY-MM-DD). */
  usage(id: number, day: string): number {
    return this.#usage.get([id, day]) ?? 0;
  }

  /** Daily counts of key `id` from `fromDay` to `toDay` inclusive. */
  usageRange(id: number, fromDay: string, toDay: string): { day: string; requests: number }[] {
    return [...this.#usage.getRange({ start: [id, fromDay], end: [id, `${toDay}~`] })].map(({ key, value }) => ({ day: key[1], requests: value }));
  }

  /**
   * Writes what the server counted: absolute daily counts and last-used times.
   * Not an authorisation change: the version stays.
   */
  recordUsage(counts: { id: number; day: string; requests: number }[], lastUsed: { id: number; at: string }[]): void {
    if (counts.length === 0 && lastUsed.length === 0) return;
    // In key order: the pages a transaction dirties are then touched in order.
    const sorted = [...counts].sort((a, b) => a.id - b.id || (a.day < b.day ? -1 : a.day > b.day ? 1 : 0));
    this.#root.transactionSync(() => {
      for (const c of sorted) this.#usage.putSync([c.id, c.day], c.requests);
      for (const u of lastUsed) {
        const record = this.keyById(u.id);
        if (record && (record.lastUsed === null || record.lastUsed < u.at)) this.#keys.putSync(record.hash, { ...record, lastUsed: u.at });
      }
    });
  }

  /** Stores a new session under a fresh random id (32 bytes); resolves with the id once committed. */
  async createSession(session: Session): Promise<string> {
    const id = randomBytes(32).toString('base64url');
    await this.#sessions.put(keyDigest(id), session);
    return id;
  }

  session(id: string): Session | undefined {
    return this.#sessions.get(keyDigest(id));
  }

  /** Records a later `seen` time (committed in the background). */
  touchSession(id: string, session: Session, seen: number): Promise<boolean> {
    return this.#sessions.put(keyDigest(id), { ...session, seen });
  }

  async endSession(id: string): Promise<void> {
    await this.#sessions.remove(keyDigest(id));
  }

  /**
   * Counts one attempt under each name (a sign-in per account and per client
   * address, a key created per account), atomically across threads and
   * processes, unless one of them has reached its `max` in its window: then
   * nothing is counted and the answer is the ms until that window ends; 0
   * means counted. A window of `windowMs` begins at the first attempt after
   * the last one ended.
   */
  countAttempt(limits: { name: string; max: number; windowMs: number }[], nowMs: number): Promise<number> {
    return this.changeAttempts(
      limits.map((l) => l.name),
      (counts) => {
        const current = counts.map((c, i) => inWindow(c, nowMs, limits[i]!.windowMs));
        const full = current.filter((c, i) => c.count >= limits[i]!.max);
        if (full.length > 0) return { counts: [], result: Math.max(...full.map((c) => c.ends - nowMs)) };
        return { counts: current.map((c) => ({ ...c, count: c.count + 1 })), result: 0 };
      },
    );
  }

  /**
   * Reads the attempt counts under `names`, lets `change` decide, and writes
   * what it returns (per name: a count, null to remove it, undefined to
   * leave it), in one transaction across threads and processes. Resolves
   * with its result.
   */
  changeAttempts<R>(names: string[], change: (counts: (AttemptCount | undefined)[]) => { counts: (AttemptCount | null | undefined)[]; result: R }): Promise<R> {
    return this.#root.transaction(() => {
      const { counts, result } = change(names.map((name) => this.#attempts.get(name)));
      counts.forEach((c, i) => {
        if (c === null) this.#attempts.remove(names[i]!);
        else if (c !== undefined) this.#attempts.put(names[i]!, c);
      });
      return result;
    });
  }

  /**
   * Removes the sessions `expired` says are over (given the session's
   * account, undefined when gone) and the attempt counts whose window has
   * ended; resolves with how many.
   */
  pruneDashboardState(expired: (s: Session, account: Account | undefined) => boolean, nowMs: number): Promise<number> {
    return this.#root.transaction(() => {
      const sessions = [...this.#sessions.getRange()].filter(({ value }) => expired(value, this.account(value.account)));
      const attempts = [...this.#attempts.getRange()].filter(({ value }) => nowMs >= value.ends);
      for (const { key } of sessions) this.#sessions.remove(key);
      for (const { key } of attempts) this.#attempts.remove(key);
      return sessions.length + attempts.length;
    });
  }

  /**
   * Writes a compacted copy of the store into the folder `dir` (as
   * `dir/data.mdb`), consistent as of one moment, while servers and
   * commands go on using the store: LMDB copies it inside a read
   * transaction. (Debian's mdb_copy cannot: lmdb-js writes a newer LMDB
   * format than the lmdb-utils of Debian 12 reads.)
   */
  async backup(dir: string): Promise<void> {
    await this.#root.backup(dir, true);
  }

  async close(): Promise<void> {
    await this.#root.close();
  }
}
