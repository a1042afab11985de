/**
 * Limits across many nodes, with no Redis round trip on the request path:
 * each node holds leases, chunks of a key's daily budget and a share of its
 * per-second budget reserved in Redis, and admits requests from them in
 * shared memory. Three parts:
 *
 * - LEASE, a Lua script run in the key's account slot: reserves daily tokens
 *   and per-second allowances, takes unused daily tokens back, adds usage,
 *   all on the Redis clock (TIME), at most once per request (a node retries
 *   a call with the same sequence number and gets the first answer back).
 * - LeaseTable, shared by a node's worker threads (a SharedArrayBuffer, one
 *   128-byte slot per key, a spinlock per slot as in limits.ts): admit()
 *   takes a token and counts the per-second window, or refuses.
 * - LeaseManager, on the node's main thread: keeps each active key's leases
 *   topped up ahead of need, sized to the key's rate, returns what an idle
 *   key holds, reports usage, and serves from what it holds while Redis
 *   cannot be reached.
 *
 * Guarantees (test/leases.test.ts shows each):
 *
 * 1. Daily: tokens for day D are reserved in Redis only while the day's
 *    reservations stay within the limit, and a node uses a token only before
 *    day D ends on the Redis clock (it stops at send time + the ms the reply
 *    said were left, earlier than the true end). So while Redis answers, no
 *    day ever admits more than its limit, whatever the number of nodes.
 * 2. Per-second: an allowance is a number of requests per second granted to
 *    one node from a start to an end (a whole second of the Redis clock);
 *    Redis grants one only while the allowances in force at every instant
 *    stay within the limit. A node counts requests in seconds of the Redis
 *    clock as it estimates it (offset from the replies, within ε = half the
 *    round trip + 2 ms), and a request within ε of a second's edge counts in
 *    both seconds. So in every second of the Redis clock at most the limit is
 *    admitted across all nodes, as long as node clocks tick at the same rate
 *    (they are not stepped) and ε holds; an allowance granted late or ended
 *    early only refuses more.
 * 3. Near the daily limit, the budget other nodes hold unused is at most one
 *    lease each (a grant is at most the unreserved budget divided by the
 *    nodes asking, and never more than a quarter of it: far from the limit,
 *    no node holds what another node's clients need), and a node gives
 *    back what it holds after IDLE_RETURN_MS
 *    without requests: at most (nodes - 1) x lease requests go unserved,
 *    for at most that long.
 * 4. Redis unreachable: a node keeps admitting from the leases it holds. When
 *    a key's daily lease runs out it may admit one more lease's worth on
 *    credit (at most the unreserved budget it last saw divided by the nodes
 *    it last saw), counted and added to the day's reservations and usage on
 *    recovery; per second, after its allowance ends, the limit divided by
 *    the nodes it last saw. So an outage can exceed a daily limit by at most
 *    one lease per node, and never loses usage.
 */
import { randomBytes } from 'node:crypto';
import { dayOf } from '../store/accounts.js';
import { accountKeys, accountTag } from '../store/redis.js';
import { LuaScript, type RedisConnection } from '../store/redis-connection.js';
import type { Plan } from '../plans.js';
import { lock, unlock, type KeyLimits, type Verdict } from './limits.js';

const DAY_MS = 86_400_000;
/** Seconds are stored relative to this (2020-01-01), as in limits.ts. */
const EPOCH_S = 1_577_836_800;

/** Allowance terms: long unless several nodes together ask for more than half the key's limit (then they compete). */
export const TERM_LONG_MS = 60_000;
export const TERM_SHORT_MS = 3_000;
/** An allowance is renewed this long before it ends. */
export const RENEW_BEFORE_MS = 1_500;
/** A node that asked for a key this recently counts as one of its nodes. */
const ACTIVE_NODE_MS = 10_000;

export const LEASE = new LuaScript(`
-- KEYS: 1 account, 2 revoked, 3 lease state, 4 usage, 5 last used
-- ARGV: 1 node, 2 key id, 3 sequence, 4 plan, 5 per day (-1: none), 6 per second,
--   7 daily tokens wanted, 8 per-second allowance wanted, 9 daily tokens returned,
--   10 their day, 11 usage "YYYY-MM-DD=n,...", 12 admitted on credit "day=n,...",
--   13 last used (Unix ms), 14 requests per second asked of this node, 15 '1': end own allowances
local node = ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local done = redis.call('HGET', KEYS[3], 'q:' .. node)
if done then
  local seq, reply = string.match(done, '^(%d+)|%d+|(.*)$')
  if seq == ARGV[3] then return reply end
end
local day = math.floor(now / ${DAY_MS})

-- Facts first, whatever the key's state: requests already admitted.
for d, n in string.gmatch(ARGV[11], '([%d-]+)=(%d+)') do redis.call('HINCRBY', KEYS[4], d, n) end
for d, n in string.gmatch(ARGV[12], '(%d+)=(%d+)') do redis.call('HINCRBY', KEYS[3], 'r:' .. d, n) end
if tonumber(ARGV[9]) > 0 and tonumber(ARGV[10]) == day then
  local r = tonumber(redis.call('HGET', KEYS[3], 'r:' .. day) or '0')
  redis.call('HSET', KEYS[3], 'r:' .. day, math.max(0, r - tonumber(ARGV[9])))
end
if tonumber(ARGV[13]) > tonumber(redis.call('HGET', KEYS[5], ARGV[2]) or '0') then redis.call('HSET', KEYS[5], ARGV[2], ARGV[13]) end

local status = 'ok'
local account = redis.call('HMGET', KEYS[1], 'status', 'plan')
if not account[1] then status = 'missing'
elseif redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then status = 'revoked'
elseif account[1] ~= 'active' then status = 'suspended'
elseif account[2] ~= ARGV[4] then status = 'plan:' .. account[2] end

redis.call('HSET', KEYS[3], 'd:' .. node, ARGV[14] .. ',' .. now)
local own = 'e:' .. node .. ':'
local nodes, demand, entries = 0, 0, {}
local fields = redis.call('HGETALL', KEYS[3])
for i = 1, #fields, 2 do
  local f, v = fields[i], fields[i + 1]
  local kind = string.sub(f, 1, 2)
  if kind == 'd:' then
    local rate, at = string.match(v, '^([%d.]+),(%d+)$')
    if now - tonumber(at) < ${ACTIVE_NODE_MS} then nodes = nodes + 1; demand = demand + tonumber(rate)
    elseif now - tonumber(at) > ${DAY_MS} then redis.call('HDEL', KEYS[3], f, 'q:' .. string.sub(f, 3), 'n:' .. string.sub(f, 3)) end
  elseif kind == 'e:' then
    local a, s, e = string.match(v, '^(%d+),(%d+),(%d+)$')
    local mine = string.sub(f, 1, #own) == own
    if tonumber(e) <= now or (mine and ARGV[15] == '1') then redis.call('HDEL', KEYS[3], f)
    else entries[#entries + 1] = {tonumber(a), tonumber(s), tonumber(e), mine} end
  elseif kind == 'r:' and tonumber(string.sub(f, 3)) < day - 1 then redis.call('HDEL', KEYS[3], f)
  end
end

local granted, remaining = 0, -1
local limit = tonumber(ARGV[5])
if limit >= 0 then
  local r = tonumber(redis.call('HGET', KEYS[3], 'r:' .. day) or '0')
  remaining = math.max(0, limit - r)
  if status == 'ok' then
    -- At most a quarter of what is left (or a share per node asking): a node alone must not reserve a
    -- small daily budget whole, or a client sent to another node is refused with most of its day left.
    granted = math.min(tonumber(ARGV[7]), remaining, math.max(1, math.ceil(remaining / math.max(4, nodes))))
    if granted > 0 then
      redis.call('HSET', KEYS[3], 'r:' .. day, r + granted)
      remaining = remaining - granted
    end
  end
end

-- The most allowance in force at any instant of [s, e).
local function peak(s, e)
  local best = 0
  local points = {s}
  for _, en in ipairs(entries) do if en[2] > s and en[2] < e then points[#points + 1] = en[2] end end
  for _, c in ipairs(points) do
    local sum = 0
    for _, en in ipairs(entries) do if en[2] <= c and c < en[3] then sum = sum + en[1] end end
    if sum > best then best = sum end
  end
  return best
end
local function grant(a, s, e)
  local n = redis.call('HINCRBY', KEYS[3], 'n:' .. node, 1)
  redis.call('HSET', KEYS[3], own .. n, a .. ',' .. s .. ',' .. e)
  entries[#entries + 1] = {a, s, e, true}
end
local P, wanted = tonumber(ARGV[6]), tonumber(ARGV[8])
if status == 'ok' and wanted > 0 then
  local target = math.min(wanted, P)
  if demand > P then target = math.min(target, math.max(1, math.floor(P * tonumber(ARGV[14]) / demand))) end
  -- Short terms only when nodes compete for the key (shares change quickly); one node alone keeps long ones.
  local term = (nodes > 1 and demand * 2 > P) and ${TERM_SHORT_MS} or ${TERM_LONG_MS}
  local current, currentEnd, lastEnd = 0, 0, 0
  for _, en in ipairs(entries) do
    if en[4] then
      if en[2] <= now and now < en[3] then current = current + en[1]; currentEnd = math.max(currentEnd, en[3]) end
      lastEnd = math.max(lastEnd, en[3])
    end
  end
  if current < target then
    local e = currentEnd > now and currentEnd or math.ceil((now + term) / 1000) * 1000
    -- What the node's measured rate needs, and beyond it at most half of what is free: a node that
    -- holds more than it uses holds it for a whole term, and nodes that come later must find some.
    local free = P - peak(now, e)
    local needed = math.ceil(tonumber(ARGV[14]) * 1.25) - current
    -- (Half rounded up: a key of 1 a second can be served at all.)
    local more = math.min(target - current, free, math.max(needed, math.ceil(free / 2)))
    if more > 0 then grant(more, now, e); lastEnd = math.max(lastEnd, e) end
  end
  -- The node asks RENEW_BEFORE_MS before the end as it sees it, which is earlier than the true end.
  if lastEnd > now and lastEnd - now <= 2 * ${RENEW_BEFORE_MS} then
    local e = math.ceil((lastEnd + term) / 1000) * 1000
    local next = math.min(target, P - peak(lastEnd, e))
    if next > 0 then grant(next, lastEnd, e) end
  end
end

local mine = {}
for _, en in ipairs(entries) do if en[4] then mine[#mine + 1] = en[1] .. ':' .. en[2] .. ':' .. en[3] end end
local reply = table.concat({status, day, (day + 1) * ${DAY_MS}, now, granted, remaining, nodes, table.concat(mine, ';')}, '|')
redis.call('HSET', KEYS[3], 'q:' .. node, ARGV[3] .. '|' .. now .. '|' .. reply)
redis.call('PEXPIRE', KEYS[3], 2 * ${DAY_MS})
return reply
`);

// Words of a slot (Int32). Times are Float64 at the word offsets given (even, so 8-byte aligned).
const W_LOCK = 0;
const W_FLAGS = 1;
const W_DAY = 2;
const W_TOKENS = 3;
const W_CREDIT = 4;
const W_SEC_LABEL = 5; // and 7: two per-second windows, by the parity of their second
const W_SEC_COUNT = 6; // and 8
const W_ALLOW_1 = 9;
const W_ALLOW_2 = 10;
const W_ADMITTED = 11;
const W_DEMAND = 12;
const W_BORROWED = 13;
const W_LAST_USED = 14;
const W_GENERATION = 15;
const W_DAY_ADMITTED = 16;
const W_EXHAUSTED_DAY = 17;
const W_REMAINING = 18;
const W_SECOND_REFUSED = 19;
const W_BRIDGE = 30;
const F_DAY_UNTIL = 20;
const F_ALLOW_1_FROM = 22;
const F_ALLOW_1_UNTIL = 24;
const F_ALLOW_2_FROM = 26;
const F_ALLOW_2_UNTIL = 28;
const SLOT_WORDS = 32;

const FLAG_UNLIMITED = 1;
const FLAG_REVOKED = 2;
const FLAG_WANTED = 4;
/** Redis has answered for the key since the manager began tracking it: no allowance now means others hold it. */
const FLAG_ANSWERED = 8;

// Header words: Float64 offset and ε at 0 and 2; Int32 after.
const H_OFFSET = 0;
const H_EPSILON = 2;
const H_STALE = 4;
const H_NODES = 5;
const H_WANT_HEAD = 6;
const H_REFUSING = 7;
const H_RING = 8;
const RING = 4096;
const HEADER_WORDS = H_RING + RING;

export interface SharedLeaseState {
  slots: SharedArrayBuffer;
  header: SharedArrayBuffer;
}

export function createLeaseState(slots: number): SharedLeaseState {
  return { slots: new SharedArrayBuffer(slots * SLOT_WORDS * 4), header: new SharedArrayBuffer(HEADER_WORDS * 4) };
}

/** Atomics.waitAsync (Node 20 has it; TypeScript's ES2022 library does not declare it). */
const waitAsync = (Atomics as unknown as {
  waitAsync(array: Int32Array, index: number, value: number, timeoutMs: number): { async: boolean; value: Promise<string> | string };
}).waitAsync;

/**
 * Waits until words[at] is no longer `value`, or `timeoutMs`. A pending
 * waitAsync does not keep a thread's event loop alive (a worker with nothing
 * else to do would end in the middle of the wait): a timer does.
 */
async function waitWithTimer(words: Int32Array, at: number, value: number, timeoutMs: number): Promise<void> {
  const waited = waitAsync(words, at, value, timeoutMs);
  if (!waited.async) return;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([waited.value, new Promise((resolve) => (timer = setTimeout(resolve, timeoutMs)))]);
  clearTimeout(timer);
}

/** The leases of one node's keys in shared memory: what worker threads admit requests from. */
export class LeaseTable implements KeyLimits {
  readonly #w: Int32Array;
  readonly #f: Float64Array;
  readonly #hw: Int32Array;
  readonly #hf: Float64Array;
  readonly slots: number;
  readonly verdict: Verdict = { admitted: false, refusedBy: null, limit: 0, remaining: 0, reset: 0, retryAfter: 0 };

  constructor(readonly state: SharedLeaseState) {
    this.#w = new Int32Array(state.slots);
    this.#f = new Float64Array(state.slots);
    this.#hw = new Int32Array(state.header);
    this.#hf = new Float64Array(state.header);
    this.slots = this.#w.length / SLOT_WORDS;
  }

  /** The allowance of slot `at` usable at `now`. */
  #allowance(at: number, now: number): number {
    const f = this.#f;
    const w = this.#w;
    let a = 0;
    if (f[(at + F_ALLOW_1_FROM) / 2]! <= now && now < f[(at + F_ALLOW_1_UNTIL) / 2]!) a += w[at + W_ALLOW_1]!;
    if (f[(at + F_ALLOW_2_FROM) / 2]! <= now && now < f[(at + F_ALLOW_2_UNTIL) / 2]!) a += w[at + W_ALLOW_2]!;
    // Between the first's end and the second's start as this node sees them (a round trip apart when
    // the second continues the first): whichever is in force, the smaller of the two is safe.
    if (a === 0 && f[(at + F_ALLOW_1_UNTIL) / 2]! <= now && now < f[(at + F_ALLOW_2_FROM) / 2]!) a = w[at + W_BRIDGE]!;
    return a;
  }

  /** The count of second `label` in slot `at` (Infinity: the window was already reused for a later second). */
  #count(at: number, label: number): number {
    const i = at + W_SEC_LABEL + 2 * (label & 1);
    const stored = this.#w[i]!;
    if (stored === label) return this.#w[i + 1]!;
    return stored > label ? Infinity : 0;
  }

  #addCount(at: number, label: number, n: number): void {
    const i = at + W_SEC_LABEL + 2 * (label & 1);
    if (this.#w[i] !== label) {
      this.#w[i] = label;
      this.#w[i + 1] = 0;
    }
    this.#w[i + 1]! += n;
  }

  #want(slot: number, at: number): void {
    if (this.#w[at + W_FLAGS]! & FLAG_WANTED) return;
    this.#w[at + W_FLAGS]! |= FLAG_WANTED;
    const position = Atomics.add(this.#hw, H_WANT_HEAD, 1);
    Atomics.store(this.#hw, H_RING + (position % RING), slot);
    Atomics.notify(this.#hw, H_WANT_HEAD);
  }

  get maxKeys(): number {
    return this.slots;
  }

  /**
   * Admits `n` requests of the key in `slot` under `plan` at local time
   * `nowMs`, or refuses them all. The verdict object is reused: refusedBy
   * 'pending' when the node holds no budget for the key yet or none left
   * and Redis may have more (the manager has been asked: wait for
   * whenChanged), 'revoked' when Redis refused the key, 'unavailable' while
   * the store has been unreachable too long (setRefusing).
   */
  admitKey(slot: number, _id: number, plan: Plan, nowMs: number, n = 1): Verdict {
    const w = this.#w;
    const f = this.#f;
    const at = slot * SLOT_WORDS;
    const v = this.verdict;
    const est = nowMs + this.#hf[H_OFFSET / 2]!;
    const epsilon = this.#hf[H_EPSILON / 2]!;
    const label = Math.floor(est / 1000) - EPOCH_S;
    const intoSecond = est - (label + EPOCH_S) * 1000;
    const edge = intoSecond < epsilon ? label - 1 : 1000 - intoSecond < epsilon ? label + 1 : null;
    const stale = Atomics.load(this.#hw, H_STALE) === 1;
    if (Atomics.load(this.#hw, H_REFUSING) === 1) {
      v.admitted = false;
      v.refusedBy = 'unavailable';
      v.retryAfter = 1;
      return v;
    }
    lock(w, at + W_LOCK);
    w[at + W_DEMAND]! += n;
    const flags = w[at + W_FLAGS]!;
    let refused: Verdict['refusedBy'] = null;
    let credit = false;
    let allowance = this.#allowance(at, nowMs);
    if (allowance === 0 && stale) allowance = Math.max(1, Math.floor(plan.requestsPerSecond / Math.max(1, Atomics.load(this.#hw, H_NODES))));
    if (flags & FLAG_REVOKED) refused = 'revoked';
    else if (!(flags & FLAG_UNLIMITED) && !(w[at + W_TOKENS]! >= n && nowMs < f[(at + F_DAY_UNTIL) / 2]!)) {
      const exhausted = w[at + W_EXHAUSTED_DAY] === Math.floor(est / DAY_MS) && w[at + W_REMAINING] === 0;
      if (stale && w[at + W_CREDIT]! >= n) credit = true;
      else refused = exhausted ? 'day' : 'pending';
    }
    if (refused === null) {
      // No allowance: none asked for yet, or other nodes hold the key's whole per-second budget now.
      if (allowance === 0) refused = flags & FLAG_ANSWERED ? 'second' : 'pending';
      else if (this.#count(at, label) + n > allowance || (edge !== null && this.#count(at, edge) + n > allowance)) refused = 'second';
    }
    if (refused === null) {
      if (credit) {
        w[at + W_CREDIT]! -= n;
        w[at + W_BORROWED]! += n;
      } else if (!(flags & FLAG_UNLIMITED)) {
        w[at + W_TOKENS]! -= n;
      }
      this.#addCount(at, label, n);
      if (edge !== null) this.#addCount(at, edge, n);
      w[at + W_ADMITTED]! += n;
      w[at + W_DAY_ADMITTED]! += n;
      w[at + W_LAST_USED] = Math.floor(nowMs / 1000) - EPOCH_S;
    } else if (refused === 'second') {
      w[at + W_SECOND_REFUSED]! += n;
    }
    // Ask for more before running out: the manager tops up ahead of need, this only wakes it early.
    if (refused === 'pending' || refused === 'second') this.#want(slot, at);
    const tokens = w[at + W_TOKENS]!;
    const remaining = w[at + W_REMAINING]!;
    const inSecond = this.#count(at, label);
    unlock(w, at + W_LOCK);

    const daily = plan.requestsPerDay;
    const nowS = Math.floor(est / 1000);
    const midnight = (Math.floor(est / DAY_MS) + 1) * 86_400;
    v.admitted = refused === null;
    v.refusedBy = refused;
    if (daily !== null) {
      v.limit = daily;
      v.remaining = Math.max(0, Math.min(daily, tokens + remaining));
      v.reset = midnight;
    } else {
      v.limit = plan.requestsPerSecond;
      v.remaining = Math.max(0, plan.requestsPerSecond - (Number.isFinite(inSecond) ? inSecond : plan.requestsPerSecond));
      v.reset = nowS + 1;
    }
    v.retryAfter = refused === 'day' ? Math.max(1, midnight - nowS) : 1;
    return v;
  }

  /** Resolves when the manager next changes `slot`'s leases, or after `timeoutMs`. */
  async whenChanged(slot: number, timeoutMs: number): Promise<void> {
    const at = slot * SLOT_WORDS + W_GENERATION;
    await waitWithTimer(this.#w, at, Atomics.load(this.#w, at), timeoutMs);
  }

  // The manager's side (main thread).

  /** Slots workers asked about since `tail`; null when the ring overflowed (look at every slot). */
  wanted(tail: number): { slots: number[] | null; head: number } {
    const head = Atomics.load(this.#hw, H_WANT_HEAD);
    if (head - tail > RING) return { slots: null, head };
    const slots: number[] = [];
    for (let p = tail; p < head; p++) slots.push(Atomics.load(this.#hw, H_RING + (p % RING)));
    return { slots, head };
  }

  /** Wakes when a worker asks for a slot (or after timeoutMs). */
  async whenWanted(head: number, timeoutMs: number): Promise<void> {
    await waitWithTimer(this.#hw, H_WANT_HEAD, head, timeoutMs);
  }

  setClock(offsetMs: number, epsilonMs: number): void {
    this.#hf[H_OFFSET / 2] = offsetMs;
    this.#hf[H_EPSILON / 2] = epsilonMs;
  }

  /** Refuse every request (503) while the store has been unreachable past the node's bound, or serve again. */
  setRefusing(refusing: boolean): void {
    Atomics.store(this.#hw, H_REFUSING, refusing ? 1 : 0);
  }

  setStale(stale: boolean, nodes: number): void {
    Atomics.store(this.#hw, H_NODES, nodes);
    Atomics.store(this.#hw, H_STALE, stale ? 1 : 0);
  }

  /** Reads a slot under its lock. */
  peek<T>(slot: number, read: (s: SlotAccess) => T): T {
    const at = slot * SLOT_WORDS;
    lock(this.#w, at + W_LOCK);
    try {
      return read(new SlotAccess(this.#w, this.#f, at));
    } finally {
      unlock(this.#w, at + W_LOCK);
    }
  }

  /** Reads and changes a slot under its lock; bumps its generation and wakes waiting requests. */
  update<T>(slot: number, change: (s: SlotAccess) => T): T {
    const at = slot * SLOT_WORDS;
    lock(this.#w, at + W_LOCK);
    let out: T;
    try {
      out = change(new SlotAccess(this.#w, this.#f, at));
    } finally {
      unlock(this.#w, at + W_LOCK);
    }
    Atomics.add(this.#w, at + W_GENERATION, 1);
    Atomics.notify(this.#w, at + W_GENERATION);
    return out;
  }
}

/** A slot's words, for the manager, inside LeaseTable.update. */
export class SlotAccess {
  constructor(
    private readonly w: Int32Array,
    private readonly f: Float64Array,
    private readonly at: number,
  ) {}

  get tokens(): number {
    return this.w[this.at + W_TOKENS]!;
  }
  set tokens(n: number) {
    this.w[this.at + W_TOKENS] = n;
  }
  get day(): number {
    return this.w[this.at + W_DAY]!;
  }
  get dayUntil(): number {
    return this.f[(this.at + F_DAY_UNTIL) / 2]!;
  }
  /** Installs daily tokens of `day`, usable until `until` (local ms). */
  setDay(day: number, tokens: number, until: number): void {
    this.w[this.at + W_DAY] = day;
    this.w[this.at + W_TOKENS] = tokens;
    this.f[(this.at + F_DAY_UNTIL) / 2] = until;
  }
  set credit(n: number) {
    this.w[this.at + W_CREDIT] = n;
  }
  get credit(): number {
    return this.w[this.at + W_CREDIT]!;
  }
  setFlags(unlimited: boolean, revoked: boolean, answered = false): void {
    const keep = this.w[this.at + W_FLAGS]! & FLAG_WANTED;
    this.w[this.at + W_FLAGS] = keep | (unlimited ? FLAG_UNLIMITED : 0) | (revoked ? FLAG_REVOKED : 0) | (answered ? FLAG_ANSWERED : 0);
  }
  clearWanted(): void {
    this.w[this.at + W_FLAGS]! &= ~FLAG_WANTED;
  }
  /** The day's budget Redis had not reserved at the last reply (for headers and the 'day' refusal). */
  setRemaining(day: number, remaining: number): void {
    this.w[this.at + W_EXHAUSTED_DAY] = day;
    this.w[this.at + W_REMAINING] = remaining;
  }
  /**
   * The node's two allowances: [requests per second, usable from, usable until] each (local ms), and
   * what may be used between them (the smaller, when the second continues the first in Redis time; else 0).
   */
  setAllowances(first: [number, number, number], second: [number, number, number], bridge = 0): void {
    this.w[this.at + W_BRIDGE] = bridge;
    this.w[this.at + W_ALLOW_1] = first[0];
    this.f[(this.at + F_ALLOW_1_FROM) / 2] = first[1];
    this.f[(this.at + F_ALLOW_1_UNTIL) / 2] = first[2];
    this.w[this.at + W_ALLOW_2] = second[0];
    this.f[(this.at + F_ALLOW_2_FROM) / 2] = second[1];
    this.f[(this.at + F_ALLOW_2_UNTIL) / 2] = second[2];
  }
  /** Cumulative counters (wrapping 32-bit): admitted, asked, admitted on credit, refused per second; last use (s since 2020). */
  counters(): { admitted: number; demand: number; borrowed: number; secondRefused: number; lastUsedMs: number; dayAdmitted: number } {
    const w = this.w;
    const at = this.at;
    return {
      admitted: w[at + W_ADMITTED]!,
      demand: w[at + W_DEMAND]!,
      borrowed: w[at + W_BORROWED]!,
      secondRefused: w[at + W_SECOND_REFUSED]!,
      lastUsedMs: w[at + W_LAST_USED] === 0 ? 0 : (w[at + W_LAST_USED]! + EPOCH_S) * 1000,
      dayAdmitted: w[at + W_DAY_ADMITTED]!,
    };
  }
  /** Takes the requests admitted on the current day's tokens since the last call. */
  takeDayAdmitted(): number {
    const n = this.w[this.at + W_DAY_ADMITTED]!;
    this.w[this.at + W_DAY_ADMITTED] = 0;
    return n;
  }
  /** Empties the slot for another key. */
  clear(): void {
    this.w.fill(0, this.at + 1, this.at + SLOT_WORDS);
  }
}

/**
 * Why the manager called Redis for a key: a worker asked (no budget held, or
 * refused by the per-second allowance), its daily tokens ran low, its day's
 * budget was all reserved (asked again now and then), its allowance ends
 * soon, it went idle, its usage was due, or the node shuts down.
 */
export type CallReason = 'asked' | 'top-up' | 'exhausted' | 'renewal' | 'idle' | 'report' | 'close';

/** A key the manager keeps leases for. */
export interface LeasedKey {
  id: number;
  account: string;
  plan: Plan;
}

/** Daily lease sizing: about this many seconds of the key's traffic per lease, within these bounds. */
export const LEASE_HORIZON_S = 60;
export const MIN_LEASE = 8;
/** Ask for more when what is left would last less than this at the key's rate. */
const TOP_UP_AHEAD_S = 5;
/** Give back what an idle key holds after this long without a request. */
export const IDLE_RETURN_MS = 10_000;
/** Report usage at least this often while a key is used (the dashboard of another node sees it that late). */
export const USAGE_REPORT_MS = 60_000;
const TICK_MS = 250;

interface Tracked {
  slot: number;
  key: LeasedKey;
  seq: number;
  /** The call in flight and its arguments (resent unchanged until answered: Redis applies it once). */
  inflight: Promise<void> | null;
  pendingArgs: string[] | null;
  /** Requests per second over the last ticks (exponentially weighted), and the busiest recent second asked. */
  rate: number;
  peakSecond: number;
  seen: { admitted: number; demand: number; borrowed: number; at: number };
  lastGrant: number;
  lastCall: number;
  lastActive: number;
  /** Usage by day text not yet reported; admitted on credit by day index not yet reported. */
  usage: Map<string, number>;
  borrowed: Map<number, number>;
  returned: { tokens: number; day: number };
  status: string;
  /** Whether the last answer granted anything. */
  lastGranted: boolean;
  /** When the node's last allowance ends (local ms; 0: none). */
  allowanceEnd: number;
  /** The credit counter (admitted while Redis was unreachable) as last reported. */
  borrowedReported: number;
  nodes: number;
  remaining: number;
  failures: number;
}

export interface LeaseManagerOptions {
  /** Unique per running node (default: random). */
  nodeId?: string;
  /** Called when a call to Redis fails (the manager retries by itself). */
  onError?: (error: unknown) => void;
  /**
   * Called when Redis says a key is no longer 'ok': 'revoked', 'suspended',
   * 'missing', or 'plan:<name>' (the account moved to another plan: track
   * the key again with it). The table refuses a revoked key already.
   */
  onKeyStatus?: (key: LeasedKey, status: string) => void;
  /** Give back what an idle key holds after this long (default IDLE_RETURN_MS). */
  idleReturnMs?: number;
  /** The key a worker asked about in a slot the manager does not track yet (undefined: none; the request waits, then 503). */
  keyInSlot?: (slot: number) => LeasedKey | undefined;
}

/**
 * Keeps the leases of a node's active keys: on the main thread, never on the
 * request path. Workers only read and decrement the shared table.
 */
export class LeaseManager {
  readonly nodeId: string;
  /** Calls made to Redis (for the benchmark and the metrics), and why: the reasons below. */
  calls = 0;
  readonly callsBy: Record<CallReason, number> = { asked: 0, 'top-up': 0, exhausted: 0, renewal: 0, idle: 0, report: 0, close: 0 };
  /** Since when Redis has not answered (0: it answers). */
  staleSince = 0;
  readonly #byslot = new Map<number, Tracked>();
  #tail = 0;
  #closed = false;
  #timer: NodeJS.Timeout | null = null;
  #watching: Promise<void> | null = null;
  #bestRtt = Infinity;
  /** Nodes asking for keys, as Redis last said: the per-second share a node takes while Redis cannot be reached. */
  #nodes = 1;
  #bestRttAt = 0;

  constructor(
    private readonly connection: RedisConnection,
    readonly table: LeaseTable,
    private readonly options: LeaseManagerOptions = {},
  ) {
    this.nodeId = options.nodeId ?? randomBytes(6).toString('base64url');
  }

  /** Starts keeping leases for `key` in `slot` (its first lease is asked for at once). */
  track(slot: number, key: LeasedKey): void {
    this.table.update(slot, (s) => {
      s.clear();
      s.setFlags(key.plan.requestsPerDay === null, false);
    });
    this.#byslot.set(slot, {
      slot,
      key,
      seq: 0,
      inflight: null,
      pendingArgs: null,
      rate: 0,
      peakSecond: 0,
      seen: { admitted: 0, demand: 0, borrowed: 0, at: Date.now() },
      lastGrant: 0,
      lastCall: 0,
      lastActive: Date.now(),
      usage: new Map(),
      borrowed: new Map(),
      returned: { tokens: 0, day: 0 },
      status: 'ok',
      lastGranted: true,
      allowanceEnd: 0,
      borrowedReported: 0,
      nodes: 1,
      remaining: -1,
      failures: 0,
    });
    void this.#call(this.#byslot.get(slot)!, 'asked');
  }

  /**
   * Stops keeping leases for the key in `slot` (revoked, gone, or on
   * another plan now): what it holds is given back and its usage reported,
   * in one last call. The slot can be tracked again for another key at once.
   */
  forget(slot: number): Promise<void> {
    const k = this.#byslot.get(slot);
    if (k === undefined) return Promise.resolve();
    this.#byslot.delete(slot);
    // The slot's counts are taken now, before another key can have the slot.
    const last = this.#arguments(k, 'close');
    return (async () => {
      await k.inflight;
      k.pendingArgs = last;
      await this.#call(k, 'close');
    })();
  }

  /**
   * Redis answered another command (the node's ping): the manager is no
   * longer cut off even if none of its keys needed a call since.
   */
  storeAnswered(): void {
    if (this.staleSince === 0) return;
    this.staleSince = 0;
    this.table.setStale(false, this.#nodes);
  }

  /** Redis did not answer a command sent at `since` (a lease call, or the node's ping): serve on credit. */
  storeUnanswered(since: number): void {
    if (this.staleSince !== 0) return;
    this.staleSince = since;
    this.table.setStale(true, this.#nodes);
  }

  /**
   * The key in `slot` as its store now holds it: leases taken under another
   * plan, or refused for a state that is over (a suspension since lifted),
   * are given back, and the next request leases anew.
   */
  refresh(slot: number, key: LeasedKey): void {
    const k = this.#byslot.get(slot);
    if (k === undefined) return;
    if (k.key.id !== key.id || k.key.plan.name !== key.plan.name || k.status !== 'ok') void this.forget(slot);
  }

  /** Runs the top-up loop and the wake-ups from workers. */
  start(): void {
    this.#timer = setInterval(() => this.#tick(), TICK_MS);
    this.#watching = this.#watch();
  }

  async #watch(): Promise<void> {
    while (!this.#closed) {
      await this.table.whenWanted(this.#tail, TICK_MS);
      const { slots, head } = this.table.wanted(this.#tail);
      this.#tail = head;
      for (const slot of slots ?? this.#byslot.keys()) {
        const k = this.#byslot.get(slot);
        if (k === undefined) {
          const key = this.options.keyInSlot?.(slot);
          if (key !== undefined) this.track(slot, key);
          continue;
        }
        this.table.update(slot, (s) => s.clearWanted());
        // A key that just got nothing waits for the tick (other nodes hold its budget): no call per request.
        if (k.inflight === null && (k.lastGranted || Date.now() - k.lastCall >= TICK_MS)) void this.#call(k, 'asked');
      }
    }
  }

  #tick(): void {
    const now = Date.now();
    for (const k of this.#byslot.values()) {
      const c = this.table.peek(k.slot, (s) => s.counters());
      // At least a tick: a key tracked a millisecond ago with one request is not at 1,000 a second.
      const dt = Math.max(TICK_MS, now - k.seen.at) / 1000;
      const asked = (c.demand - k.seen.demand) | 0;
      const admitted = (c.admitted - k.seen.admitted) | 0;
      k.rate = 0.7 * k.rate + 0.3 * (asked / dt);
      k.peakSecond = Math.max(0.9 * k.peakSecond, asked / dt);
      if (admitted > 0) k.lastActive = now;
      k.seen = { admitted: c.admitted, demand: c.demand, borrowed: c.borrowed, at: now };
      if (k.inflight !== null) continue;
      const s = this.table.peek(k.slot, (s) => ({ tokens: s.tokens, until: s.dayUntil, held: s.tokens > 0 || s.credit > 0, unreported: s.counters().dayAdmitted !== 0 }));
      const unlimited = k.key.plan.requestsPerDay === null;
      const idle = now - k.lastActive >= (this.options.idleReturnMs ?? IDLE_RETURN_MS);
      const usable = k.status === 'ok';
      // A key whose budget is all reserved asks again now and then: other nodes give back what they do not use.
      const exhausted = k.remaining === 0 && !unlimited;
      if (idle) {
        if (s.held || s.unreported || k.usage.size > 0 || k.allowanceEnd > now) void this.#call(k, 'idle');
      } else if (usable && !unlimited && !exhausted && (s.tokens < Math.max(k.rate * TOP_UP_AHEAD_S, k.lastGrant / 4) || now >= s.until - RENEW_BEFORE_MS)) {
        void this.#call(k, 'top-up');
      } else if (usable && exhausted && asked > 0 && now - k.lastCall >= 1000) {
        void this.#call(k, 'exhausted');
      } else if (usable && k.allowanceEnd > 0 && k.allowanceEnd - now <= RENEW_BEFORE_MS) {
        void this.#call(k, 'renewal');
      } else if (now - k.lastCall >= USAGE_REPORT_MS && s.unreported) {
        void this.#call(k, 'report');
      }
    }
  }

  /** One LEASE call for key `k` (what it asks depends on `why`); retried with the same arguments until answered. */
  #call(k: Tracked, why: CallReason): Promise<void> {
    if (k.inflight !== null) return k.inflight;
    const run = async () => {
      if (k.pendingArgs === null) k.pendingArgs = this.#arguments(k, why);
      const keys = accountKeys(this.connection, accountTag(k.key.account));
      const sent = Date.now();
      try {
        this.calls++;
        this.callsBy[why]++;
        const reply = await this.connection.script<string>(LEASE, [keys.account, keys.revoked, keys.lease(k.key.id), keys.usage(k.key.id), keys.lastUsed], k.pendingArgs);
        const received = Date.now();
        k.pendingArgs = null;
        k.failures = 0;
        this.#answered(k, reply, sent, received, why);
        this.#nodes = Math.max(1, k.nodes);
        this.storeAnswered();
      } catch (error) {
        k.failures++;
        this.storeUnanswered(sent);
        // Requests waiting for this lease go on from what the node holds on credit.
        if (this.#byslot.get(k.slot) === k) this.table.update(k.slot, () => undefined);
        this.options.onError?.(error);
      }
    };
    k.inflight = run().finally(() => {
      k.inflight = null;
    });
    return k.inflight;
  }

  #arguments(k: Tracked, why: CallReason): string[] {
    const plan = k.key.plan;
    const ending = why === 'idle' || why === 'close';
    // Take what the table counted, and (when ending) what it holds, out of it first.
    const taken = this.table.update(k.slot, (s) => {
      const day = s.day;
      const dayAdmitted = s.takeDayAdmitted();
      const c = s.counters();
      const returned = ending && day !== 0 ? s.tokens : 0;
      if (ending) {
        s.tokens = 0;
        s.credit = 0;
        s.setAllowances([0, 0, 0], [0, 0, 0]);
      }
      return { day, dayAdmitted, returned, held: s.tokens, borrowed: c.borrowed, lastUsedMs: c.lastUsedMs };
    });
    if (taken.dayAdmitted !== 0) {
      const text = dayOf((taken.day || Math.floor(Date.now() / DAY_MS)) * DAY_MS);
      k.usage.set(text, (k.usage.get(text) ?? 0) + taken.dayAdmitted);
    }
    const borrowed = (taken.borrowed - k.borrowedReported) | 0;
    if (borrowed !== 0) {
      const day = taken.day || Math.floor(Date.now() / DAY_MS);
      k.borrowed.set(day, (k.borrowed.get(day) ?? 0) + borrowed);
      k.borrowedReported = taken.borrowed;
    }
    // Up to one lease held: a node asked again for its per-second allowance does not pile up daily tokens.
    const wantDaily = ending || plan.requestsPerDay === null ? 0 : Math.max(0, this.#leaseSize(k) - taken.held);
    // Room for the key's busiest recent second and then some; the script grants beyond the measured
    // rate only from half of what is free.
    const wantRate = ending ? 0 : plan.requestsPerSecond;
    const usage = [...k.usage].map(([d, n]) => `${d}=${n}`).join(',');
    const credit = [...k.borrowed].map(([d, n]) => `${d}=${n}`).join(',');
    k.usage.clear();
    k.borrowed.clear();
    k.seq++;
    return [
      this.nodeId,
      String(k.key.id),
      String(k.seq),
      plan.name,
      String(plan.requestsPerDay ?? -1),
      String(plan.requestsPerSecond),
      String(wantDaily),
      String(wantRate),
      String(taken.returned),
      String(taken.day),
      usage,
      credit,
      String(taken.lastUsedMs),
      k.rate.toFixed(2),
      ending ? '1' : '0',
    ];
  }

  /** Start small, then about LEASE_HORIZON_S seconds of the key's traffic. */
  #leaseSize(k: Tracked): number {
    const daily = k.key.plan.requestsPerDay!;
    return Math.min(daily, Math.max(MIN_LEASE, Math.ceil(k.rate * LEASE_HORIZON_S)));
  }

  #answered(k: Tracked, reply: string, sent: number, received: number, why: string): void {
    const [status, day, dayEnd, now, granted, remaining, nodes, mine] = reply.split('|') as string[];
    const redisNow = Number(now);
    const rtt = received - sent;
    // Cristian's bound: Redis read its clock between send and receive. Keep the tightest recent estimate.
    if (rtt <= this.#bestRtt || received - this.#bestRttAt > 60_000) {
      this.#bestRtt = rtt;
      this.#bestRttAt = received;
      this.table.setClock(redisNow - (sent + received) / 2, rtt / 2 + 2);
    }
    const previous = k.status;
    k.status = status!;
    k.nodes = Number(nodes);
    k.remaining = Number(remaining);
    k.lastCall = received;
    const grantedTokens = Number(granted);
    if (grantedTokens > 0) k.lastGrant = grantedTokens;
    const toLocalFrom = (t: number) => (t <= redisNow ? received : received + (t - redisNow));
    const toLocalUntil = (t: number) => sent + (t - redisNow);
    const entries = (mine ?? '')
      .split(';')
      .filter((e) => e !== '')
      .map((e) => e.split(':').map(Number) as [number, number, number]);
    // The node's allowance now (entries in force end together) and the next one.
    const current = entries.filter(([, s, e]) => s <= redisNow && redisNow < e);
    const next = entries.filter(([, s]) => s > redisNow).sort((a, b) => a[1] - b[1])[0];
    const first: [number, number, number] =
      current.length === 0 ? [0, 0, 0] : [current.reduce((n, [a]) => n + a, 0), received, toLocalUntil(Math.min(...current.map(([, , e]) => e)))];
    const second: [number, number, number] = next === undefined ? [0, 0, 0] : [next[0], toLocalFrom(next[1]), toLocalUntil(next[2])];
    const continues = next !== undefined && current.length > 0 && next[1] === Math.min(...current.map(([, , e]) => e));
    const bridge = continues ? Math.min(first[0], next[0]) : 0;
    const lastEnd = Math.max(0, ...entries.map(([, , e]) => e));
    k.allowanceEnd = lastEnd > 0 ? toLocalUntil(lastEnd) : 0;
    k.lastGranted = grantedTokens > 0 || entries.length > 0;
    if (status !== previous) this.options.onKeyStatus?.(k.key, status!);
    // A key forgotten meanwhile: its slot may be another key's now.
    if (this.#byslot.get(k.slot) !== k) return;
    const revoked = status === 'revoked' || status === 'suspended' || status === 'missing';
    this.table.update(k.slot, (s) => {
      // After giving everything back the node holds no allowance it asked for: the next request waits for one.
      const ended = why === 'idle' || why === 'close';
      s.setFlags(k.key.plan.requestsPerDay === null, revoked, !ended);
      if (ended) return;
      if (k.key.plan.requestsPerDay !== null) {
        const d = Number(day);
        if (s.day !== d) {
          // A new day: the old day's leftover tokens are void; what was counted on them is reported.
          const left = s.takeDayAdmitted();
          if (left !== 0 && s.day !== 0) {
            const text = dayOf(s.day * DAY_MS);
            k.usage.set(text, (k.usage.get(text) ?? 0) + left);
          }
          s.setDay(d, grantedTokens, toLocalUntil(Number(dayEnd)));
        } else {
          s.setDay(d, s.tokens + grantedTokens, toLocalUntil(Number(dayEnd)));
        }
        s.setRemaining(d, Number(remaining));
        s.credit = Math.min(k.lastGrant, Math.floor(Number(remaining) / Math.max(1, k.nodes)));
      }
      s.setAllowances(first, second, bridge);
    });
  }

  /** Returns what every key holds and reports its usage (on shutdown), each call within the command time limit. */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer) clearInterval(this.#timer);
    await this.#watching;
    await Promise.all([...this.#byslot.values()].map(async (k) => {
      await k.inflight;
      await this.#call(k, 'close');
      if (k.pendingArgs !== null) await this.#call(k, 'close');
    }));
  }
}
