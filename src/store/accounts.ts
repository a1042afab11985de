/**
 * Accounts and API keys, in an LMDB environment of their own (lmdb-js) under
 * <data>/accounts: the server, the `ipr accounts`/`ipr keys` commands and the
 * dashboard all open it, from any number of processes.
 *
 * Keys are `ipr_` and 43 URL-safe characters (32 random bytes); only their
 * SHA-256 digest is stored, and keys are found by digest, so a lookup's
 * timing says nothing about the key. The first 8 characters, the "prefix",
 * are unique and shown in lists. Passwords are stored as scrypt hashes.
 *
 * Every change that can alter an authorisation decision (a key created or
 * revoked, an account suspended or moved to another plan, allowed addresses)
 * bumps `version` in the same transaction; servers compare it on each request
 * and drop what they cached, so such a change takes effect at once.
 *
 * The dashboard's sessions and sign-in attempt counters live here too, so
 * that every worker thread and process sees the same ones. Their writes are
 * asynchronous (lmdb-js commits them off the calling thread): a worker
 * answering the API never waits for a dashboard's disk sync.
 */
import { createHash, randomBytes, scrypt as scryptCallback, timingSafeEqual } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { open, type Database, type RootDatabase } from 'lmdb';
import { IprError } from '../errors.js';
import { canonicalAddress } from '../snapshot.js';

const scrypt = promisify(scryptCallback) as (password: string, salt: Buffer, length: number, options: object) => Promise<Buffer>;

export const KEY_TAG = 'ipr_';
export const PREFIX_LENGTH = 8;
export const MIN_PASSWORD_LENGTH = 10;
const SCRYPT = { N: 16384, r: 8, p: 1, length: 32 };
const ABSENT_PASSWORD_HASH = `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=`;

export type AccountStatus = 'active' | 'suspended';

export interface Account {
  email: string;
  passwordHash: string;
  plan: string;
  status: AccountStatus;
  created: string;
}

export interface KeyRecord {
  /** Sequential, never reused: the key's slot in the server's shared limit table. */
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

/** A signed-in dashboard session, stored under the SHA-256 of its id (the id itself is never stored). */
export interface Session {
  account: string;
  /** Sent back by the dashboard's pages in a header with every change (CSRF). */
  csrf: string;
  /** Unix ms. */
  created: number;
  /** Unix ms of the last request seen, updated at most once a minute. */
  seen: number;
}

/** Attempts counted under one name (see countAttempt) in a fixed window. */
interface AttemptCount {
  count: number;
  /** Unix ms at which the window ends. */
  ends: number;
}

/** UTC day as YYYY-MM-DD. */
export function dayOf(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

/** SHA-256, hex: how keys and session ids are stored. */
export function keyDigest(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

export function normaliseEmail(email: string): string {
  const e = email.trim().toLowerCase();
  if (e.length > 254 || !/^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(e)) throw new IprError('invalid_argument', `not an email address: ${JSON.stringify(email)}`);
  return e;
}

/** Validates a list of addresses or CIDR prefixes; returns them canonical. */
export function normaliseAllowed(list: string[]): string[] {
  return list.map((entry) => {
    const [address, len, ...rest] = entry.trim().split('/');
    const canonical = canonicalAddress(address);
    const width = canonical?.includes(':') && !canonical.startsWith('::ffff:') ? 128 : 32;
    const ok = canonical !== null && rest.length === 0 && (len === undefined || (/^[0-9]{1,3}$/.test(len) && Number(len) <= width));
    if (!ok) throw new IprError('invalid_argument', `not an address or CIDR prefix: ${JSON.stringify(entry)}`);
    return len === undefined ? canonical : `${canonical}/${Number(len)}`;
  });
}

/** The scrypt hash of a password (refuses a password shorter than MIN_PASSWORD_LENGTH): what every store keeps. */
export async function hashPassword(password: string): Promise<string> {
  if (password.length < MIN_PASSWORD_LENGTH) {
    throw new IprError('invalid_argument', `a password needs at least ${MIN_PASSWORD_LENGTH} characters`);
  }
  const salt = randomBytes(16);
  const hash = await scrypt(password, salt, SCRYPT.length, { N: SCRYPT.N, r: SCRYPT.r, p: SCRYPT.p });
  return `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$${salt.toString('base64')}$${hash.toString('base64')}`;
}

/** Whether `password` matches a hash of hashPassword; `undefined` (no account) costs the same and is false. */
export async function passwordMatches(password: string, stored: string | undefined): Promise<boolean> {
  if (stored === undefined) {
    // Without an account, hash anyway so the answer takes as long.
    await passwordMatches(password, ABSENT_PASSWORD_HASH);
    return false;
  }
  const [scheme, N, r, p, salt, hash] = stored.split('$');
  if (scheme !== 'scrypt' || !salt || !hash) return false;
  const expected = Buffer.from(hash, 'base64');
  const actual = await scrypt(password, Buffer.from(salt, 'base64'), expected.length, { N: Number(N), r: Number(r), p: Number(p) });
  return timingSafeEqual(actual, expected);
}

export class AccountStore {
  readonly #root: RootDatabase;
  readonly #accounts: Database<Account, string>;
  readonly #keys: Database<KeyRecord, string>;
  readonly #keyIds: Database<string, number>;
  readonly #prefixes: Database<number, string>;
  readonly #accountKeys: Database<number, string>;
  readonly #usage: Database<number, [number, string]>;
  readonly #meta: Database<number, string>;
  readonly #sessions: Database<Session, string>;
  readonly #attempts: Database<AttemptCount, string>;

  constructor(dataDir: string) {
    const dir = path.join(dataDir, 'accounts');
    mkdirSync(dir, { recursive: true });
    this.#root = open({ path: dir, maxDbs: 16 });
    this.#accounts = this.#root.openDB({ name: 'accounts' });
    this.#keys = this.#root.openDB({ name: 'keys' });
    this.#keyIds = this.#root.openDB({ name: 'keyIds' });
    this.#prefixes = this.#root.openDB({ name: 'prefixes' });
    this.#accountKeys = this.#root.openDB({ name: 'accountKeys', dupSort: true });
    this.#usage = this.#root.openDB({ name: 'usage' });
    this.#meta = this.#root.openDB({ name: 'meta' });
    this.#sessions = this.#root.openDB({ name: 'sessions' });
    this.#attempts = this.#root.openDB({ name: 'signInAttempts' });
  }

  /** Bumped by every change that can alter an authorisation decision. */
  version(): number {
    return this.#meta.get('version') ?? 0;
  }

  /** Keys issued so far have ids below this. */
  nextKeyId(): number {
    return this.#meta.get('nextKeyId') ?? 0;
  }

  #bump(): void {
    this.#meta.putSync('version', this.version() + 1);
  }

  account(email: string): Account | undefined {
    return this.#accounts.get(normaliseEmail(email));
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
      this.#bump();
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
    return (await passwordMatches(password, account?.passwordHash)) ? account : undefined;
  }

  #updateAccount(email: string, change: (a: Account) => Account): Account {
    return this.#root.transactionSync(() => {
      const updated = change(this.#requireAccount(email));
      this.#accounts.putSync(updated.email, updated);
      this.#bump();
      return updated;
    });
  }

  setPlan(email: string, plan: string): Account {
    return this.#updateAccount(email, (a) => ({ ...a, plan }));
  }

  setStatus(email: string, status: AccountStatus): Account {
    return this.#updateAccount(email, (a) => ({ ...a, status }));
  }

  /** Creates a key; the key itself is returned here and never again. */
  createKey(email: string, name: string, allowed: string[] = []): { key: string; record: KeyRecord } {
    const trimmed = name.trim();
    if (trimmed.length === 0 || trimmed.length > 100) throw new IprError('invalid_argument', 'a key needs a name of 1 to 100 characters');
    const allowedList = normaliseAllowed(allowed);
    return this.#root.transactionSync(() => {
      const account = this.#requireAccount(email);
      let key: string;
      do key = KEY_TAG + randomBytes(32).toString('base64url');
      while (this.#prefixes.get(key.slice(0, PREFIX_LENGTH)) !== undefined);
      const id = this.nextKeyId();
      const record: KeyRecord = {
        id,
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
      this.#bump();
      return { key, record };
    });
  }

  keyByDigest(digest: string): KeyRecord | undefined {
    return this.#keys.get(digest);
  }

  keyById(id: number): KeyRecord | undefined {
    const digest = this.#keyIds.get(id);
    return digest === undefined ? undefined : this.#keys.get(digest);
  }

  /** The account's keys, revoked ones included, oldest first. */
  listKeys(email: string): KeyRecord[] {
    const account = this.#requireAccount(email);
    return [...this.#accountKeys.getValues(account.email)]
      .map((id) => this.keyById(id))
      .filter((k): k is KeyRecord => k !== undefined)
      .sort((a, b) => a.id - b.id);
  }

  #updateKey(email: string, prefix: string, change: (k: KeyRecord) => KeyRecord): KeyRecord {
    return this.#root.transactionSync(() => {
      const account = this.#requireAccount(email);
      const id = this.#prefixes.get(prefix);
      const record = id === undefined ? undefined : this.keyById(id);
      // Another account's key is "no such key" here: never confirm it exists.
      if (!record || record.account !== account.email) throw new IprError('key_missing', `no key ${prefix} in account ${account.email}`);
      const updated = change(record);
      this.#keys.putSync(updated.hash, updated);
      this.#bump();
      return updated;
    });
  }

  /** Revokes a key of the account, at once and for good. */
  revokeKey(email: string, prefix: string): KeyRecord {
    return this.#updateKey(email, prefix, (k) => (k.revoked ? k : { ...k, revoked: new Date().toISOString() }));
  }

  setAllowed(email: string, prefix: string, allowed: string[]): KeyRecord {
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
    this.#root.transactionSync(() => {
      for (const c of counts) this.#usage.putSync([c.id, c.day], c.requests);
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
    return this.#root.transaction(() => {
      const current = limits.map(({ name, windowMs }) => {
        const c = this.#attempts.get(name);
        return c === undefined || nowMs >= c.ends || c.ends - nowMs > windowMs ? { count: 0, ends: nowMs + windowMs } : c;
      });
      const full = current.filter((c, i) => c.count >= limits[i]!.max);
      if (full.length > 0) return Math.max(...full.map((c) => c.ends - nowMs));
      current.forEach((c, i) => this.#attempts.put(limits[i]!.name, { count: c.count + 1, ends: c.ends }));
      return 0;
    });
  }

  /** Takes back one attempt counted under `name` (a sign-in that succeeded), or all of them when `all`. */
  forgetAttempt(name: string, all = false): Promise<void> {
    return this.#root.transaction(() => {
      const c = this.#attempts.get(name);
      if (c === undefined) return;
      if (all || c.count <= 1) this.#attempts.remove(name);
      else this.#attempts.put(name, { count: c.count - 1, ends: c.ends });
    });
  }

  /** Removes the sessions `expired` says are over and the attempt counts whose window has ended; resolves with how many. */
  pruneDashboardState(expired: (s: Session) => boolean, nowMs: number): Promise<number> {
    return this.#root.transaction(() => {
      const sessions = [...this.#sessions.getRange()].filter(({ value }) => expired(value));
      const attempts = [...this.#attempts.getRange()].filter(({ value }) => nowMs >= value.ends);
      for (const { key } of sessions) this.#sessions.remove(key);
      for (const { key } of attempts) this.#attempts.remove(key);
      return sessions.length + attempts.length;
    });
  }

  async close(): Promise<void> {
    await this.#root.close();
  }
}
