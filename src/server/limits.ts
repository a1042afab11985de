/**
 * Request limits shared by every worker thread of a server: counters live in
 * a SharedArrayBuffer, and each admission runs under a per-slot spinlock
 * (a handful of instructions), so no more requests are ever admitted than a
 * limit allows, whichever thread answers them.
 *
 * Windows (docs/API.md "Limits"): the UTC calendar day, and the wall-clock second
 * (a fixed window: its Reset is the next whole second).
 *
 * Key slots are indexed by the key's slot (accounts.ts), which a new key
 * reuses once its key is revoked. A slot records which key (id + 1) its
 * counts belong to; the first admission of another key resets them, under
 * the slot's lock, so a new key never starts with a revoked one's counts,
 * whichever process made it. Counts are persisted by the main thread under
 * that key's id (usage.ts) and loaded back on start. So that persisting
 * costs what changed and not the size of the table, a slot admitted since it
 * was last persisted is marked dirty (a bit of its lock word) and queued once
 * in a shared ring; the main thread drains the ring. Requests without a
 * valid key are limited per client address in a second, hashed table.
 */
import type { Plan } from '../plans.js';

/** Seconds are stored relative to this (2020-01-01) so they fit an Int32 until 2088. */
const EPOCH_S = 1_577_836_800;

// Words of a key slot. The lock word holds the lock (bit 0), "counted since
// last persisted" (DIRTY) and "the day before ended since last persisted"
// (ROLLED), so that one atomic operation takes the lock and reads them.
const K_LOCK = 0, K_DAY = 1, K_DAY_COUNT = 2, K_SECOND = 3, K_SECOND_COUNT = 4, K_PREV_DAY = 5, K_PREV_COUNT = 6, K_LAST_USED = 7, K_OWNER = 8;
/** One 64-byte cache line per key: no two keys' locks share a line. */
const KEY_WORDS = 16;
const LOCKED = 1, DIRTY = 2, ROLLED = 4;
// Words of the dirty ring: how many places workers have reserved, how many
// the main thread has read (both counting on past 2^32, so the ring's size
// is a power of two); then the ring (slot + 1; 0: reserved, not written yet).
const R_WRITE = 0, R_READ = 1, R_FIRST = 2;
// Words of an address slot.
const A_LOCK = 0, A_SECOND = 1, A_COUNT = 2, A_ADDRESS = 3; // 4 words of address
const ADDRESS_WORDS = 8;
const ADDRESS_PROBES = 8;

export interface SharedLimitState {
  keys: SharedArrayBuffer;
  /** Ids of dirty key slots, each at most once: a power of two of places, at least one per slot. */
  dirty: SharedArrayBuffer;
  addresses: SharedArrayBuffer;
}

/** What one admission decided, and the rate-limit headers of its window. Reused between calls. */
export interface Verdict {
  admitted: boolean;
  /**
   * Which limit refused: 'day' or 'second'. With a shared store's leases
   * (leases.ts) also 'pending' (the node holds no budget for the key yet:
   * wait for whenChanged), 'revoked' (the store refused the key) and
   * 'unavailable' (the store has been unreachable past --store-max-stale).
   */
  refusedBy: 'day' | 'second' | 'pending' | 'revoked' | 'unavailable' | null;
  limit: number;
  remaining: number;
  /** Unix seconds at which the window resets. */
  reset: number;
  /** Whole seconds until a retry can succeed. */
  retryAfter: number;
}

/**
 * A key's limits as the request path asks them, from one node's counters
 * (Limits) or from the leases it holds of a shared store's (LeaseTable).
 */
export interface KeyLimits {
  /** Slots at or past this cannot be served (503). */
  readonly maxKeys: number;
  /** Admits `n` requests of key `id` (in `slot`) under `plan` at `nowMs`, or refuses them all. The verdict is reused. */
  admitKey(slot: number, id: number, plan: Plan, nowMs: number, n?: number): Verdict;
  /** Resolves when what `slot` holds may have changed (after 'pending'), or after `timeoutMs`. */
  whenChanged(slot: number, timeoutMs: number): Promise<void>;
}

export function createLimitState(maxKeys: number, addressSlots = 1 << 16): SharedLimitState {
  return {
    keys: new SharedArrayBuffer(maxKeys * KEY_WORDS * 4),
    // A power of two, so that the write position wrapping at 2^32 wraps the ring too.
    dirty: new SharedArrayBuffer((R_FIRST + 2 ** Math.ceil(Math.log2(maxKeys))) * 4),
    addresses: new SharedArrayBuffer(addressSlots * ADDRESS_WORDS * 4),
  };
}

/** Takes a slot's lock; returns the other bits of its lock word. Also used by leases.ts. */
export function lock(words: Int32Array, at: number): number {
  for (;;) {
    const bits = Atomics.load(words, at) & ~LOCKED;
    if (Atomics.compareExchange(words, at, bits, bits | LOCKED) === bits) return bits;
    // Held for a few instructions by another thread: spin.
  }
}

/** Releases a slot's lock, leaving `bits` in its lock word. */
export function unlock(words: Int32Array, at: number, bits = 0): void {
  Atomics.store(words, at, bits);
}

/** Makes the slot at `at` key `id`'s (under its lock): another key's counts are cleared first. */
function claim(k: Int32Array, at: number, id: number): void {
  if (k[at + K_OWNER] === id + 1) return;
  k.fill(0, at + 1, at + KEY_WORDS);
  k[at + K_OWNER] = id + 1;
}

export class Limits implements KeyLimits {
  readonly #keys: Int32Array;
  readonly #dirty: Uint32Array;
  readonly #addresses: Int32Array;
  readonly #addressSlots: number;
  readonly maxKeys: number;
  /** The verdict object every call fills (the caller reads it before the next call). */
  readonly verdict: Verdict = { admitted: false, refusedBy: null, limit: 0, remaining: 0, reset: 0, retryAfter: 0 };

  constructor(state: SharedLimitState) {
    this.#keys = new Int32Array(state.keys);
    this.#dirty = new Uint32Array(state.dirty);
    this.#addresses = new Int32Array(state.addresses);
    this.#addressSlots = this.#addresses.length / ADDRESS_WORDS;
    this.maxKeys = this.#keys.length / KEY_WORDS;
  }

  /** Never 'pending': a node's own counters are all there is. */
  async whenChanged(): Promise<void> {}

  /**
   * Admits `n` requests of key `id` (in `slot`) under `plan` at `nowMs`, or
   * refuses them all. Daily limit first, then the per-second one.
   */
  admitKey(slot: number, id: number, plan: Plan, nowMs: number, n = 1): Verdict {
    const k = this.#keys;
    const at = slot * KEY_WORDS;
    const day = Math.floor(nowMs / 86_400_000);
    const second = Math.floor(nowMs / 1000) - EPOCH_S;
    const v = this.verdict;
    let bits = lock(k, at + K_LOCK);
    claim(k, at, id);
    const wasDirty = (bits & DIRTY) !== 0;
    if (k[at + K_DAY] !== day) {
      if (k[at + K_DAY] !== 0) {
        k[at + K_PREV_DAY] = k[at + K_DAY]!;
        k[at + K_PREV_COUNT] = k[at + K_DAY_COUNT]!;
        bits |= ROLLED | DIRTY;
      }
      k[at + K_DAY] = day;
      k[at + K_DAY_COUNT] = 0;
    }
    if (k[at + K_SECOND] !== second) {
      k[at + K_SECOND] = second;
      k[at + K_SECOND_COUNT] = 0;
    }
    const dayCount = k[at + K_DAY_COUNT]!;
    const secondCount = k[at + K_SECOND_COUNT]!;
    const daily = plan.requestsPerDay;
    if (daily !== null && dayCount + n > daily) {
      v.admitted = false;
      v.refusedBy = 'day';
    } else if (secondCount + n > plan.requestsPerSecond) {
      v.admitted = false;
      v.refusedBy = 'second';
    } else {
      k[at + K_DAY_COUNT] = dayCount + n;
      k[at + K_SECOND_COUNT] = secondCount + n;
      k[at + K_LAST_USED] = second;
      v.admitted = true;
      v.refusedBy = null;
      bits |= DIRTY;
    }
    const counted = k[at + K_DAY_COUNT]!;
    const inSecond = k[at + K_SECOND_COUNT]!;
    unlock(k, at + K_LOCK, bits);
    if (!wasDirty && (bits & DIRTY) !== 0) this.#queueDirty(slot);

    const nowS = Math.floor(nowMs / 1000);
    const midnight = (day + 1) * 86_400;
    if (daily !== null) {
      // docs/API.md "Rate-limit headers": a daily plan's headers describe the day, even for a per-second refusal.
      v.limit = daily;
      v.remaining = Math.max(0, daily - counted);
      v.reset = midnight;
    } else {
      v.limit = plan.requestsPerSecond;
      v.remaining = Math.max(0, plan.requestsPerSecond - inSecond);
      v.reset = nowS + 1;
    }
    v.retryAfter = v.refusedBy === 'day' ? Math.max(1, midnight - nowS) : 1;
    return v;
  }

  /**
   * Admits one request from a client without a valid key (`address`: 16
   * bytes, IPv4 as IPv4-mapped) against `perSecond`. Addresses share a slot
   * only when all the slots they may probe are busy this same second.
   */
  admitAddress(address: Uint8Array, perSecond: number, nowMs: number): Verdict {
    const a = this.#addresses;
    const w0 = (address[0]! << 24) | (address[1]! << 16) | (address[2]! << 8) | address[3]!;
    const w1 = (address[4]! << 24) | (address[5]! << 16) | (address[6]! << 8) | address[7]!;
    const w2 = (address[8]! << 24) | (address[9]! << 16) | (address[10]! << 8) | address[11]!;
    const w3 = (address[12]! << 24) | (address[13]! << 16) | (address[14]! << 8) | address[15]!;
    let h = Math.imul(w0 ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(w1, 0xc2b2ae35) ^ Math.imul(w2, 0x27d4eb2f) ^ Math.imul(w3, 0x165667b1);
    h = Math.imul(h ^ (h >>> 15), 0x2c1b3c6d) >>> 0;
    const second = Math.floor(nowMs / 1000) - EPOCH_S;
    const v = this.verdict;
    let at = 0;
    for (let probe = 0; probe < ADDRESS_PROBES; probe++) {
      at = ((h + probe) % this.#addressSlots) * ADDRESS_WORDS;
      lock(a, at + A_LOCK);
      const same = a[at + A_ADDRESS] === w0 && a[at + A_ADDRESS + 1] === w1 && a[at + A_ADDRESS + 2] === w2 && a[at + A_ADDRESS + 3] === w3;
      if (same || a[at + A_SECOND] !== second || probe === ADDRESS_PROBES - 1) {
        if (!same || a[at + A_SECOND] !== second) {
          a[at + A_SECOND] = second;
          a[at + A_COUNT] = 0;
          a[at + A_ADDRESS] = w0;
          a[at + A_ADDRESS + 1] = w1;
          a[at + A_ADDRESS + 2] = w2;
          a[at + A_ADDRESS + 3] = w3;
        }
        break;
      }
      unlock(a, at + A_LOCK);
    }
    const count = a[at + A_COUNT]!;
    v.admitted = count < perSecond;
    if (v.admitted) a[at + A_COUNT] = count + 1;
    const after = a[at + A_COUNT]!;
    unlock(a, at + A_LOCK);
    v.refusedBy = v.admitted ? null : 'second';
    v.limit = perSecond;
    v.remaining = Math.max(0, perSecond - after);
    v.reset = Math.floor(nowMs / 1000) + 1;
    v.retryAfter = 1;
    return v;
  }

  /** Queues a slot that just became dirty: once, until the main thread takes it (takeDirty). */
  #queueDirty(slot: number): void {
    const r = this.#dirty;
    const place = Atomics.add(r, R_WRITE, 1) & (r.length - R_FIRST - 1);
    Atomics.store(r, R_FIRST + place, slot + 1);
  }

  /** Sets the count of key `id` (in `slot`) for a day (at start, from the persisted usage). */
  loadKeyUsage(slot: number, id: number, dayMs: number, requests: number): void {
    const k = this.#keys;
    const at = slot * KEY_WORDS;
    const bits = lock(k, at + K_LOCK);
    claim(k, at, id);
    k[at + K_DAY] = Math.floor(dayMs / 86_400_000);
    k[at + K_DAY_COUNT] = requests;
    unlock(k, at + K_LOCK, bits);
  }

  /**
   * A consistent copy of a slot's counters: the key they belong to, the
   * current day and its count, the day before it and its final count (0 when
   * none), last use in Unix ms (0 when never).
   */
  readKey(slot: number): KeyCounts {
    const k = this.#keys;
    const at = slot * KEY_WORDS;
    const bits = lock(k, at + K_LOCK);
    const out = this.#counts(slot, at, bits);
    unlock(k, at + K_LOCK, bits);
    return out;
  }

  #counts(slot: number, at: number, bits: number): KeyCounts {
    const k = this.#keys;
    return {
      slot,
      id: k[at + K_OWNER] === 0 ? null : k[at + K_OWNER]! - 1,
      day: k[at + K_DAY]!,
      requests: k[at + K_DAY_COUNT]!,
      prevDay: k[at + K_PREV_DAY]!,
      prevRequests: k[at + K_PREV_COUNT]!,
      lastUsedMs: k[at + K_LAST_USED] === 0 ? 0 : (k[at + K_LAST_USED]! + EPOCH_S) * 1000,
      rolled: (bits & ROLLED) !== 0,
    };
  }

  /**
   * The counters of every key admitted since its last take, each once, and
   * marks them clean (main thread only: one reader of the ring). A slot
   * counted again while this runs is queued again.
   */
  takeDirty(): KeyCounts[] {
    const r = this.#dirty;
    const mask = r.length - R_FIRST - 1;
    const taken: KeyCounts[] = [];
    // Up to where workers had reserved places when the take began: a key
    // counted again meanwhile waits for the next take.
    const end = Atomics.load(r, R_WRITE);
    for (let read = r[R_READ]!; read !== end; read = (read + 1) >>> 0) {
      const place = R_FIRST + (read & mask);
      const entry = Atomics.load(r, place);
      if (entry === 0) break; // a worker reserved this place and has not written it yet: next time
      Atomics.store(r, place, 0);
      r[R_READ] = (read + 1) >>> 0;
      const slot = entry - 1;
      const k = this.#keys;
      const at = slot * KEY_WORDS;
      const bits = lock(k, at + K_LOCK);
      taken.push(this.#counts(slot, at, bits));
      unlock(k, at + K_LOCK, 0);
    }
    return taken;
  }
}

export interface KeyCounts {
  slot: number;
  /** The id of the key the counts belong to; null: the slot was never used. */
  id: number | null;
  /** Unix day (days since 1970-01-01) of the current count; 0: never counted. */
  day: number;
  requests: number;
  /** The day before the current one, and its final count (0 when none). */
  prevDay: number;
  prevRequests: number;
  /** Unix ms of the last admitted request; 0: never. */
  lastUsedMs: number;
  /** The day before ended since the counts were last taken: its final count is to be written. */
  rolled: boolean;
}
