/**
 * Request limits shared by every worker thread of a server: counters live in
 * a SharedArrayBuffer, and each admission runs under a per-slot spinlock
 * (a handful of instructions), so no more requests are ever admitted than a
 * limit allows, whichever thread answers them.
 *
 * Windows (decisions.md): the UTC calendar day, and the wall-clock second
 * (a fixed window: its Reset is the next whole second).
 *
 * Key slots are indexed by key id. Their counts are persisted by the main
 * thread (usage.ts) and loaded back on start. Requests without a valid key
 * are limited per client address in a second, hashed table.
 */
import type { Plan } from '../plans.js';

/** Seconds are stored relative to this (2020-01-01) so they fit an Int32 until 2088. */
const EPOCH_S = 1_577_836_800;

// Words of a key slot.
const K_LOCK = 0, K_DAY = 1, K_DAY_COUNT = 2, K_SECOND = 3, K_SECOND_COUNT = 4, K_PREV_DAY = 5, K_PREV_COUNT = 6, K_LAST_USED = 7;
const KEY_WORDS = 8;
// Words of an address slot.
const A_LOCK = 0, A_SECOND = 1, A_COUNT = 2, A_ADDRESS = 3; // 4 words of address
const ADDRESS_WORDS = 8;
const ADDRESS_PROBES = 8;

export interface SharedLimitState {
  keys: SharedArrayBuffer;
  addresses: SharedArrayBuffer;
}

/** What one admission decided, and the rate-limit headers of its window. Reused between calls. */
export interface Verdict {
  admitted: boolean;
  /** Which limit refused: 'day' or 'second'. */
  refusedBy: 'day' | 'second' | null;
  limit: number;
  remaining: number;
  /** Unix seconds at which the window resets. */
  reset: number;
  /** Whole seconds until a retry can succeed. */
  retryAfter: number;
}

export function createLimitState(maxKeys: number, addressSlots = 1 << 16): SharedLimitState {
  return {
    keys: new SharedArrayBuffer(maxKeys * KEY_WORDS * 4),
    addresses: new SharedArrayBuffer(addressSlots * ADDRESS_WORDS * 4),
  };
}

/** Takes the spinlock in words[at] (held for a few instructions by whoever has it). Also used by leases.ts. */
export function lock(words: Int32Array, at: number): void {
  while (Atomics.compareExchange(words, at, 0, 1) !== 0) {
    // Held for a few instructions by another thread: spin.
  }
}

export function unlock(words: Int32Array, at: number): void {
  Atomics.store(words, at, 0);
}

export class Limits {
  readonly #keys: Int32Array;
  readonly #addresses: Int32Array;
  readonly #addressSlots: number;
  readonly maxKeys: number;
  /** The verdict object every call fills (the caller reads it before the next call). */
  readonly verdict: Verdict = { admitted: false, refusedBy: null, limit: 0, remaining: 0, reset: 0, retryAfter: 0 };

  constructor(state: SharedLimitState) {
    this.#keys = new Int32Array(state.keys);
    this.#addresses = new Int32Array(state.addresses);
    this.#addressSlots = this.#addresses.length / ADDRESS_WORDS;
    this.maxKeys = this.#keys.length / KEY_WORDS;
  }

  /**
   * Admits `n` requests of key `id` under `plan` at `nowMs`, or refuses them
   * all. Daily limit first, then the per-second one.
   */
  admitKey(id: number, plan: Plan, nowMs: number, n = 1): Verdict {
    const k = this.#keys;
    const at = id * KEY_WORDS;
    const day = Math.floor(nowMs / 86_400_000);
    const second = Math.floor(nowMs / 1000) - EPOCH_S;
    const v = this.verdict;
    lock(k, at + K_LOCK);
    if (k[at + K_DAY] !== day) {
      if (k[at + K_DAY] !== 0) {
        k[at + K_PREV_DAY] = k[at + K_DAY]!;
        k[at + K_PREV_COUNT] = k[at + K_DAY_COUNT]!;
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
    }
    const counted = k[at + K_DAY_COUNT]!;
    const inSecond = k[at + K_SECOND_COUNT]!;
    unlock(k, at + K_LOCK);

    const nowS = Math.floor(nowMs / 1000);
    const midnight = (day + 1) * 86_400;
    if (daily !== null) {
      // decisions.md: a daily plan's headers describe the day, even for a per-second refusal.
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

  /** Sets a key's count for a day (at start, from the persisted usage). */
  loadKeyUsage(id: number, dayMs: number, requests: number): void {
    const k = this.#keys;
    const at = id * KEY_WORDS;
    lock(k, at + K_LOCK);
    k[at + K_DAY] = Math.floor(dayMs / 86_400_000);
    k[at + K_DAY_COUNT] = requests;
    unlock(k, at + K_LOCK);
  }

  /**
   * A consistent copy of key `id`'s counters: the current day and its count,
   * the day before it and its final count (0 when none), last use in Unix ms
   * (0 when never).
   */
  readKey(id: number): { day: number; requests: number; prevDay: number; prevRequests: number; lastUsedMs: number } {
    const k = this.#keys;
    const at = id * KEY_WORDS;
    lock(k, at + K_LOCK);
    const out = {
      day: k[at + K_DAY]!,
      requests: k[at + K_DAY_COUNT]!,
      prevDay: k[at + K_PREV_DAY]!,
      prevRequests: k[at + K_PREV_COUNT]!,
      lastUsedMs: k[at + K_LAST_USED] === 0 ? 0 : (k[at + K_LAST_USED]! + EPOCH_S) * 1000,
    };
    unlock(k, at + K_LOCK);
    return out;
  }
}
