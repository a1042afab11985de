/**
 * The customer store on Redis (or Valkey), shared by every node of a
 * deployment: `IPR_STORE=redis://...`. Same behaviour as the LMDB store of
 * one data folder (accounts.ts), behind the same interface (types.ts).
 *
 * Key layout, every key under the connection's prefix P (default `ipr:`):
 *
 *   P{a:H}:account          HASH  email, passwordHash, plan, status, created, version,
 *                                 sessionGeneration (absent: 0; bumped to end every session)
 *   P{a:H}:keys             HASH  key id -> JSON {id, account, name, prefix, hash, created}
 *   P{a:H}:prefixes         HASH  key prefix -> key id
 *   P{a:H}:revoked          HASH  key id -> ISO time
 *   P{a:H}:allowed          HASH  key id -> JSON list of addresses and prefixes
 *   P{a:H}:last-used        HASH  key id -> Unix ms (written by the lease script, leases.ts)
 *   P{a:H}:usage:<id>       HASH  UTC day -> requests (written by the lease script)
 *   P{a:H}:unpublished      LIST  changes written but not yet in the stream (redis-changes.ts)
 *   P{a:H}:lease:...        the limit leases of the account's keys (leases.ts)
 *   P{k:<digest>}           STRING "H|<key id>": where the key of that SHA-256 lives
 *   P{key-ids}              STRING the last key id given out (INCR)
 *   P{s:<digest>}           STRING a session (JSON) under the SHA-256 of its id, with a TTL
 *   P{t:<name hash>}        HASH  count, ends[, turn]: an attempt window, expiring with it
 *   P{t:<name hash>}:pair:<client hash>   the same, of one client on the account
 *                                 whose failures the first one counts (one slot: one script)
 *   P{refusals}             HASH  reason -> refused creations (countRefusal)
 *   P{changes}, P{outbox}   the change stream and its write-ahead outbox
 *
 * H is the first 16 hex digits of the SHA-256 of the account's email: a hash
 * tag, so every key of one customer sits in one hash slot and the scripts
 * that change an account run on one Cluster node. (An email itself could
 * hold braces, which would change the tag.)
 *
 * A key is found by its digest from any node: the digest's own slot holds a
 * pointer to the account's slot. Creating a key writes the pointer first,
 * then the record (one script in the account's slot). A writer that dies
 * between the two leaves a pointer to no record, which reads as "no such
 * key": nobody ever saw that key (it is shown only in the answer that
 * creates it), and a record is never reachable without its pointer.
 * Revocation and the rest change only the record, so a key's state is always
 * read in one place.
 *
 * Key prefixes (the 8 characters shown in lists) are unique within an
 * account: every operation that names a prefix is scoped by an account, and
 * a unique prefix over all accounts would need a write in one more slot.
 */
import { createHash, randomBytes } from 'node:crypto';
import { IprError } from '../errors.js';
import { dayOf, KEY_TAG, keyDigest, keyName, PREFIX_LENGTH, type Account, type AccountStatus, type KeyRecord, type Session } from './accounts.js';
import { normaliseAllowed } from './allowed.js';
import { normaliseEmail } from './emails.js';
import { hashPassword, passwordMatches } from './passwords.js';
import { LuaScript, RedisConnection } from './redis-connection.js';
import { addToStream, followStream, newChangeId, outboxKey, sweepOutbox, type PendingChange } from './redis-changes.js';
import { signInNames } from './sign-in.js';
import type { AttemptLimit, Change, ChangeFeedHandlers, ChangeFollower, CustomerStore, DayUsage, KeyToday, SignInAdmission, SignInRules } from './types.js';

/** The hash tag of an account: 16 hex digits of the SHA-256 of its (normalised) email. */
export function accountTag(email: string): string {
  return createHash('sha256').update(email).digest('hex').slice(0, 16);
}

/** Names of an account's keys (all in one hash slot). */
export function accountKeys(connection: RedisConnection, tag: string) {
  const base = connection.key(`{a:${tag}}:`);
  return {
    account: `${base}account`,
    keys: `${base}keys`,
    prefixes: `${base}prefixes`,
    revoked: `${base}revoked`,
    allowed: `${base}allowed`,
    lastUsed: `${base}last-used`,
    unpublished: `${base}unpublished`,
    usage: (id: number) => `${base}usage:${id}`,
    lease: (id: number) => `${base}lease:${id}`,
  };
}

// Every writing script bumps the account's version and queues its change in
// `unpublished` (ARGV[1] is the change id; redis-changes.ts publishes it).
const QUEUE = `
local function queue(change)
  redis.call('HINCRBY', KEYS[1], 'version', 1)
  redis.call('RPUSH', KEYS[2], cjson.encode({id = ARGV[1], change = change}))
end
`;

/** KEYS: account, unpublished. ARGV: change id, email, password hash, plan, created. 1: made; 0: exists. */
const CREATE_ACCOUNT = new LuaScript(`${QUEUE}
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'email', ARGV[2], 'passwordHash', ARGV[3], 'plan', ARGV[4], 'status', 'active', 'created', ARGV[5])
queue({type = 'account-created', account = ARGV[2]})
return 1
`);

/**
 * KEYS: account, unpublished. ARGV: change id, field (plan|status|passwordHash;
 * '': none), value, change type ('': not a change of the feed), '1' to end
 * every session of the account. The account's fields, or false.
 */
const UPDATE_ACCOUNT = new LuaScript(`${QUEUE}
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], ARGV[2], ARGV[3]) end
if ARGV[5] == '1' then redis.call('HINCRBY', KEYS[1], 'sessionGeneration', 1) end
if ARGV[4] ~= '' then queue({type = ARGV[4], account = redis.call('HGET', KEYS[1], 'email')}) end
return redis.call('HGETALL', KEYS[1])
`);

/**
 * KEYS: account, unpublished, keys, prefixes, allowed. ARGV: change id, key
 * id, record JSON, prefix, digest, allowed JSON. 1: made; -1: no account;
 * -2: the prefix is taken in this account.
 */
const CREATE_KEY = new LuaScript(`${QUEUE}
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('HSETNX', KEYS[4], ARGV[4], ARGV[2]) == 0 then return -2 end
redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
redis.call('HSET', KEYS[5], ARGV[2], ARGV[6])
queue({type = 'key-created', account = redis.call('HGET', KEYS[1], 'email'), key = tonumber(ARGV[2]), digest = ARGV[5]})
return 1
`);

/**
 * KEYS: account, unpublished, keys, prefixes, revoked, allowed. ARGV: change
 * id, prefix, what (revoke|allowed), value (ISO time | JSON list). The key
 * id, or -1: no account; -2: no such key in it.
 */
const UPDATE_KEY = new LuaScript(`${QUEUE}
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local id = redis.call('HGET', KEYS[4], ARGV[2])
if not id then return -2 end
local record = cjson.decode(redis.call('HGET', KEYS[3], id))
if ARGV[3] == 'revoke' then
  if redis.call('HSETNX', KEYS[5], id, ARGV[4]) == 0 then return tonumber(id) end
  queue({type = 'key-revoked', account = record.account, key = record.id, digest = record.hash})
else
  redis.call('HSET', KEYS[6], id, ARGV[4])
  queue({type = 'key-allowed', account = record.account, key = record.id, digest = record.hash})
end
return tonumber(id)
`);

/**
 * KEYS: keys, revoked, allowed, last-used. ARGV: key ids (none: every key).
 * Per key: record JSON, revoked, allowed, last used (false when absent).
 */
const READ_KEYS = new LuaScript(`
local ids = ARGV
if #ids == 0 then ids = redis.call('HKEYS', KEYS[1]) end
local out = {}
for _, id in ipairs(ids) do
  local record = redis.call('HGET', KEYS[1], id)
  if record then
    out[#out + 1] = {record, redis.call('HGET', KEYS[2], id), redis.call('HGET', KEYS[3], id), redis.call('HGET', KEYS[4], id)}
  end
end
return out
`);

/**
 * One attempt window (KEYS[1]) on the Redis clock. ARGV: max, window ms.
 * Counts one attempt and answers 0, or answers the ms until the full window ends.
 */
const COUNT_ATTEMPT = new LuaScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local max, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local count = tonumber(redis.call('HGET', KEYS[1], 'count') or '0')
local ends = tonumber(redis.call('HGET', KEYS[1], 'ends') or '0')
if now >= ends or ends - now > window then count = 0; ends = now + window end
if count >= max then return ends - now end
redis.call('HSET', KEYS[1], 'count', count + 1, 'ends', ends)
redis.call('PEXPIREAT', KEYS[1], ends)
return 0
`);

/**
 * A sign-in attempt, as admitSignIn (sign-in.ts) counts it, on the Redis
 * clock. KEYS: the client's window on the account, the account's failures
 * (one slot). ARGV: window ms, max per account and client, failures from
 * which attempts wait, longest wait. {1, wait ms} counted, or {0, ms} refused.
 */
const ADMIT_SIGN_IN = new LuaScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window, maxPair, slowFrom, maxWait = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local function read(key)
  local count = tonumber(redis.call('HGET', key, 'count') or '0')
  local ends = tonumber(redis.call('HGET', key, 'ends') or '0')
  if now >= ends or ends - now > window then return 0, now + window, 0 end
  return count, ends, tonumber(redis.call('HGET', key, 'turn') or '0')
end
local pair, pairEnds = read(KEYS[1])
if pair >= maxPair then return {0, pairEnds - now} end
local failures, failuresEnd, turn = read(KEYS[2])
local wait = 0
if failures >= slowFrom then wait = math.min(1000 * 2 ^ (failures - slowFrom), maxWait) end
if wait > 0 and pair > 0 then
  turn = math.max(now, turn) + wait
  if turn - now > maxWait then return {0, turn - wait - now} end
  redis.call('HSET', KEYS[2], 'count', failures, 'ends', failuresEnd, 'turn', turn)
  redis.call('PEXPIREAT', KEYS[2], failuresEnd)
  wait = turn - now
end
redis.call('HSET', KEYS[1], 'count', pair + 1, 'ends', pairEnds)
redis.call('PEXPIREAT', KEYS[1], pairEnds)
return {1, wait}
`);

/** Takes back one attempt (ARGV[1] = '1': all of them). */
const FORGET_ATTEMPT = new LuaScript(`
local count = tonumber(redis.call('HGET', KEYS[1], 'count') or '0')
if ARGV[1] == '1' or count <= 1 then redis.call('DEL', KEYS[1]) else redis.call('HINCRBY', KEYS[1], 'count', -1) end
return 0
`);

function fieldsOf(flat: string[]): Map<string, string> {
  const m = new Map<string, string>();
  for (let i = 0; i + 1 < flat.length; i += 2) m.set(flat[i]!, flat[i + 1]!);
  return m;
}

function accountOf(flat: string[]): Account | undefined {
  const f = fieldsOf(flat);
  const email = f.get('email');
  if (email === undefined) return undefined;
  const generation = f.get('sessionGeneration');
  const account: Account = { email, passwordHash: f.get('passwordHash')!, plan: f.get('plan')!, status: f.get('status') as AccountStatus, created: f.get('created')! };
  return generation === undefined ? account : { ...account, sessionGeneration: Number(generation) };
}

type KeyRow = [record: string, revoked: string | null, allowed: string | null, lastUsed: string | null];

function keyOf([record, revoked, allowed, lastUsed]: KeyRow): KeyRecord {
  const r = JSON.parse(record) as Omit<KeyRecord, 'revoked' | 'allowed' | 'lastUsed'>;
  return { ...r, lastUsed: lastUsed ? new Date(Number(lastUsed)).toISOString() : null, revoked: revoked || null, allowed: allowed ? (JSON.parse(allowed) as string[]) : [] };
}

export class RedisCustomerStore implements CustomerStore {
  readonly kind = 'redis';

  constructor(readonly connection: RedisConnection) {}

  /** Connects to the store of a URL (redis-connection.ts). */
  static async open(url: string, options: { commandTimeoutMs?: number } = {}): Promise<RedisCustomerStore> {
    return new RedisCustomerStore(await RedisConnection.open(url, { ...options, name: 'ipr' }));
  }

  #keys(email: string) {
    return accountKeys(this.connection, accountTag(email));
  }

  /**
   * Runs an account-changing script within the write-ahead outbox
   * (redis-changes.ts): outbox member, script, stream entry, clean-up.
   * `run` gets the change id, passes it as ARGV[1], and resolves what the
   * script answered; the change is published only when `published(answer)`.
   */
  async #change<T>(email: string, run: (changeId: string) => Promise<T>, published: (answer: T) => boolean): Promise<T> {
    const tag = accountTag(email);
    const k = accountKeys(this.connection, tag);
    const id = newChangeId();
    const outbox = outboxKey(this.connection);
    const member = `${tag}|${id}`;
    await this.connection.command(outbox, ['ZADD', outbox, Math.floor(await this.connection.time(outbox)), member]);
    const answer = await run(id);
    if (published(answer)) {
      const queued = await this.connection.command<string[]>(k.unpublished, ['LRANGE', k.unpublished, 0, -1]);
      for (const text of queued) {
        const pending = JSON.parse(text) as PendingChange;
        if (pending.id !== id) continue;
        await addToStream(this.connection, pending.change);
        await this.connection.command(k.unpublished, ['LREM', k.unpublished, 1, text]);
      }
    }
    await this.connection.command(outbox, ['ZREM', outbox, member]);
    return answer;
  }

  async account(email: string): Promise<Account | undefined> {
    const k = this.#keys(normaliseEmail(email));
    return accountOf(await this.connection.command<string[]>(k.account, ['HGETALL', k.account]));
  }

  /** Every account, by email. */
  async listAccounts(): Promise<Account[]> {
    const names = await this.connection.scan(this.connection.key('{a:*}:account'));
    const accounts = await Promise.all(names.map(async (name) => accountOf(await this.connection.command<string[]>(name, ['HGETALL', name]))));
    return accounts.filter((a): a is Account => a !== undefined).sort((a, b) => (a.email < b.email ? -1 : a.email > b.email ? 1 : 0));
  }

  async createAccount(email: string, password: string, plan: string): Promise<Account> {
    const normal = normaliseEmail(email);
    const account: Account = { email: normal, passwordHash: await hashPassword(password), plan, status: 'active', created: new Date().toISOString() };
    const k = this.#keys(normal);
    const made = await this.#change(
      normal,
      (id) => this.connection.script<number>(CREATE_ACCOUNT, [k.account, k.unpublished], [id, normal, account.passwordHash, plan, account.created]),
      (answer) => answer === 1,
    );
    if (made !== 1) throw new IprError('account_exists', `an account ${normal} exists`);
    return account;
  }

  async verifyPassword(email: string, password: string): Promise<Account | undefined> {
    let account: Account | undefined;
    try {
      account = await this.account(email);
    } catch (error) {
      if (error instanceof IprError && error.code === 'store_unavailable') throw error;
      account = undefined;
    }
    return (await passwordMatches(password, account?.passwordHash)) ? account : undefined;
  }

  /**
   * Sets one field of the account (none: ''), bumping its session generation
   * when `endSessions`, in one script; a change of the feed when `type`
   * says which (a password or the sessions alter no answer of the API).
   */
  async #updateAccount(email: string, field: 'plan' | 'status' | 'passwordHash' | '', value: string, type: Change['type'] | null, endSessions: boolean): Promise<Account> {
    const normal = normaliseEmail(email);
    const k = this.#keys(normal);
    const run = (id: string) =>
      this.connection.script<string[] | null>(UPDATE_ACCOUNT, [k.account, k.unpublished], [id, field, value, type ?? '', endSessions ? '1' : '0']);
    const flat = type === null ? await run('') : await this.#change(normal, run, (answer) => answer !== null);
    const account = flat === null ? undefined : accountOf(flat);
    if (account === undefined) throw new IprError('account_missing', `no account ${normal}`);
    return account;
  }

  setPlan(email: string, plan: string): Promise<Account> {
    return this.#updateAccount(email, 'plan', plan, 'account-plan', false);
  }

  /** Suspending ends the account's sessions for good: reactivating it does not bring them back. */
  setStatus(email: string, status: AccountStatus): Promise<Account> {
    return this.#updateAccount(email, 'status', status, 'account-status', status === 'suspended');
  }

  async setPassword(email: string, password: string): Promise<Account> {
    return this.#updateAccount(email, 'passwordHash', await hashPassword(password), null, true);
  }

  endSessions(email: string): Promise<Account> {
    return this.#updateAccount(email, '', '', null, true);
  }

  /** No key slots here (see KeyRecord): `reserve` is for stores that have them. */
  async createKey(email: string, name: string, allowed: string[] = [], _reserve = 0): Promise<{ key: string; record: KeyRecord }> {
    const trimmed = keyName(name);
    const allowedList = normaliseAllowed(allowed);
    const normal = normaliseEmail(email);
    const tag = accountTag(normal);
    const k = accountKeys(this.connection, tag);
    const idKey = this.connection.key('{key-ids}');
    for (;;) {
      const key = KEY_TAG + randomBytes(32).toString('base64url');
      const id = await this.connection.command<number>(idKey, ['INCR', idKey]);
      const record: KeyRecord = {
        // No slot: each node maps the keys it serves to its own lease table (leases.ts).
        id,
        account: normal,
        name: trimmed,
        prefix: key.slice(0, PREFIX_LENGTH),
        hash: keyDigest(key),
        created: new Date().toISOString(),
        lastUsed: null,
        revoked: null,
        allowed: allowedList,
      };
      const pointer = this.#pointer(record.hash);
      // The pointer first: without it the record cannot be reached (see above).
      await this.connection.command(pointer, ['SET', pointer, `${tag}|${id}`]);
      const stored = JSON.stringify({ id, account: record.account, name: record.name, prefix: record.prefix, hash: record.hash, created: record.created });
      const made = await this.#change(
        normal,
        (changeId) =>
          this.connection.script<number>(CREATE_KEY, [k.account, k.unpublished, k.keys, k.prefixes, k.allowed], [changeId, id, stored, record.prefix, record.hash, JSON.stringify(allowedList)]),
        (answer) => answer === 1,
      );
      if (made === 1) return { key, record };
      await this.connection.command(pointer, ['DEL', pointer]);
      if (made === -1) throw new IprError('account_missing', `no account ${normal}`);
      // -2: the prefix is taken in this account: draw another key.
    }
  }

  async createKeys(email: string, names: string[], allowed: string[] = [], _reserve = 0): Promise<{ key: string; record: KeyRecord }[]> {
    // Every name checked before the first key is made.
    names.forEach(keyName);
    normaliseAllowed(allowed);
    const made = [];
    for (const name of names) made.push(await this.createKey(email, name, allowed));
    return made;
  }

  async keySlots(): Promise<null> {
    return null;
  }

  async countRefusal(reason: string): Promise<void> {
    const key = this.connection.key('{refusals}');
    await this.connection.command(key, ['HINCRBY', key, reason, 1]);
  }

  async refusals(): Promise<Map<string, number>> {
    const key = this.connection.key('{refusals}');
    return new Map([...fieldsOf(await this.connection.command<string[]>(key, ['HGETALL', key]))].map(([reason, n]) => [reason, Number(n)]));
  }

  #pointer(digest: string): string {
    return this.connection.key(`{k:${digest}}`);
  }

  async #readKeys(tag: string, ids: number[]): Promise<KeyRecord[]> {
    const k = accountKeys(this.connection, tag);
    const rows = await this.connection.script<KeyRow[]>(READ_KEYS, [k.keys, k.revoked, k.allowed, k.lastUsed], ids);
    return rows.map(keyOf).sort((a, b) => a.id - b.id);
  }

  async keyByDigest(digest: string): Promise<KeyRecord | undefined> {
    if (!/^[0-9a-f]{64}$/.test(digest)) return undefined;
    const pointer = await this.connection.command<string | null>(this.#pointer(digest), ['GET', this.#pointer(digest)]);
    if (pointer === null) return undefined;
    const [tag, id] = pointer.split('|') as [string, string];
    const [record] = await this.#readKeys(tag, [Number(id)]);
    return record?.hash === digest ? record : undefined;
  }

  async listKeys(email: string): Promise<KeyRecord[]> {
    const normal = normaliseEmail(email);
    if ((await this.account(normal)) === undefined) throw new IprError('account_missing', `no account ${normal}`);
    return this.#readKeys(accountTag(normal), []);
  }

  async #updateKey(email: string, prefix: string, what: 'revoke' | 'allowed', value: string): Promise<KeyRecord> {
    const normal = normaliseEmail(email);
    const tag = accountTag(normal);
    const k = accountKeys(this.connection, tag);
    const answer = await this.#change(
      normal,
      (id) => this.connection.script<number>(UPDATE_KEY, [k.account, k.unpublished, k.keys, k.prefixes, k.revoked, k.allowed], [id, prefix, what, value]),
      (n) => n >= 0,
    );
    if (answer === -1) throw new IprError('account_missing', `no account ${normal}`);
    // Another account's key is "no such key" here: never confirm it exists.
    if (answer === -2) throw new IprError('key_missing', `no key ${prefix} in account ${normal}`);
    const [record] = await this.#readKeys(tag, [answer]);
    return record!;
  }

  revokeKey(email: string, prefix: string): Promise<KeyRecord> {
    return this.#updateKey(email, prefix, 'revoke', new Date().toISOString());
  }

  setAllowed(email: string, prefix: string, allowed: string[]): Promise<KeyRecord> {
    return this.#updateKey(email, prefix, 'allowed', JSON.stringify(normaliseAllowed(allowed)));
  }

  async usageRange(key: Pick<KeyRecord, 'id' | 'account'>, fromDay: string, toDay: string): Promise<DayUsage[]> {
    const usage = this.#keys(key.account).usage(key.id);
    const flat = await this.connection.command<string[]>(usage, ['HGETALL', usage]);
    return [...fieldsOf(flat)]
      .filter(([day]) => day >= fromDay && day <= toDay)
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([day, n]) => ({ day, requests: Number(n) }));
  }

  async keyToday(key: KeyRecord, nowMs: number): Promise<KeyToday> {
    const usage = this.#keys(key.account).usage(key.id);
    const requests = await this.connection.command<string | null>(usage, ['HGET', usage, dayOf(nowMs)]);
    return { requests: Number(requests ?? 0), lastUsed: key.lastUsed };
  }

  #session(id: string): string {
    return this.connection.key(`{s:${keyDigest(id)}}`);
  }

  async createSession(session: Session, ttlMs: number): Promise<string> {
    const id = randomBytes(32).toString('base64url');
    const key = this.#session(id);
    await this.connection.command(key, ['SET', key, JSON.stringify(session), 'PX', Math.max(1, Math.ceil(ttlMs))]);
    return id;
  }

  async session(id: string): Promise<Session | undefined> {
    const key = this.#session(id);
    const text = await this.connection.command<string | null>(key, ['GET', key]);
    return text === null ? undefined : (JSON.parse(text) as Session);
  }

  async touchSession(id: string, session: Session, seen: number, ttlMs: number): Promise<void> {
    const key = this.#session(id);
    // XX: a session ended meanwhile stays ended.
    await this.connection.command(key, ['SET', key, JSON.stringify({ ...session, seen }), 'PX', Math.max(1, Math.ceil(ttlMs)), 'XX']);
  }

  async endSession(id: string): Promise<void> {
    const key = this.#session(id);
    await this.connection.command(key, ['DEL', key]);
  }

  #nameHash(name: string): string {
    return createHash('sha256').update(name).digest('hex').slice(0, 24);
  }

  #attempt(name: string): string {
    return this.connection.key(`{t:${this.#nameHash(name)}}`);
  }

  /**
   * Each name's window is counted atomically in its own slot (names of one
   * sign-in need not share one). When a later name is full, the attempts
   * already counted are taken back: meanwhile a parallel attempt may be
   * refused for them, never admitted past a limit.
   */
  async countAttempt(limits: AttemptLimit[], _nowMs: number): Promise<number> {
    const counted: string[] = [];
    for (const { name, max, windowMs } of limits) {
      const key = this.#attempt(name);
      const waitMs = await this.connection.script<number>(COUNT_ATTEMPT, [key], [max, windowMs]);
      if (waitMs > 0) {
        await Promise.all(counted.map((n) => this.forgetAttempt(n)));
        return waitMs;
      }
      counted.push(name);
    }
    return 0;
  }

  async forgetAttempt(name: string, all = false): Promise<void> {
    await this.connection.script(FORGET_ATTEMPT, [this.#attempt(name)], [all ? 1 : 0]);
  }

  /**
   * The client's count over every account first (its own slot), then the
   * account's counters in one script; a refusal by the second takes the
   * first back (as countAttempt does).
   */
  async admitSignIn(account: string, client: string, rules: SignInRules, _nowMs: number): Promise<SignInAdmission> {
    const names = signInNames(account, client);
    const clientWait = await this.connection.script<number>(COUNT_ATTEMPT, [this.#attempt(names.client)], [rules.maxPerClient, rules.windowMs]);
    if (clientWait > 0) return { refusedMs: clientWait };
    const failures = this.#attempt(names.failures);
    const [counted, ms] = await this.connection.script<[number, number]>(
      ADMIT_SIGN_IN,
      [`${failures}:pair:${this.#nameHash(client)}`, failures],
      [rules.windowMs, rules.maxPerAccountAndClient, rules.slowFromFailures, rules.maxWaitMs],
    );
    if (counted === 1) return { waitMs: ms };
    await this.forgetAttempt(names.client);
    return { refusedMs: ms };
  }

  async signInFailed(account: string, rules: SignInRules, _nowMs: number): Promise<void> {
    await this.connection.script(COUNT_ATTEMPT, [this.#attempt(signInNames(account, '').failures)], [Number.MAX_SAFE_INTEGER, rules.windowMs]);
  }

  async signInSucceeded(account: string, client: string): Promise<void> {
    const names = signInNames(account, client);
    const pair = `${this.#attempt(names.failures)}:pair:${this.#nameHash(client)}`;
    await Promise.all([this.connection.command(pair, ['DEL', pair]), this.forgetAttempt(names.client)]);
  }

  /** Sessions and attempt windows end by their TTL here. */
  async pruneDashboardState(): Promise<number> {
    return 0;
  }

  /** Publishes changes whose writers did not finish (see redis-changes.ts); resolves how many. */
  sweepOutbox(graceMs?: number): Promise<number> {
    return sweepOutbox(this.connection, (tag) => accountKeys(this.connection, tag).unpublished, graceMs);
  }

  follow(from: string | null, handlers: ChangeFeedHandlers, onError?: (error: unknown) => void): Promise<ChangeFollower> {
    return followStream(this.connection, from, handlers, { unpublished: (tag) => accountKeys(this.connection, tag).unpublished, onError });
  }

  async close(): Promise<void> {
    await this.connection.close();
  }
}
