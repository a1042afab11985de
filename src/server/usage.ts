/**
 * Persists what the workers counted: every second the main thread takes the
 * slots admitted since the last flush (the limit table's dirty ring: the
 * cost follows the keys that changed, not the size of the table) and writes
 * each one's daily count (and the final count of the day before, after a
 * rollover) to the account store, under the id of the key the slot's counts
 * belong to. A kill -9 loses at most the last second. On start the day's
 * counts of the active keys are loaded back, so limits hold across restarts.
 *
 * Last use is written when it moved by a minute or more, and at shutdown: the
 * dashboard reads the live counters while the server runs, and a kill -9
 * loses at most that minute of it.
 */
import type { AccountStore } from '../store/accounts.js';
import { dayOf } from '../store/accounts.js';
import type { Clock } from '../clock.js';
import type { Limits } from './limits.js';

const DAY_MS = 86_400_000;
const LAST_USED_STEP_MS = 60_000;

export class UsageRecorder {
  readonly #store: AccountStore;
  readonly #limits: Limits;
  readonly #clock: Clock;
  /** Per slot: the key (id + 1) whose last use was written, and that last use in Unix seconds. */
  readonly #lastUsedOwner: Uint32Array;
  readonly #lastUsedWritten: Uint32Array;
  /** "YYYY-MM-DD" by Unix day: a flush names the same day or two for every key. */
  readonly #dayNames = new Map<number, string>();
  /** Per slot: a last use (Unix ms; 0: none) not written yet because it moved by less than the step, and its key (id + 1). */
  readonly #pendingMs: Float64Array;
  readonly #pendingOwner: Uint32Array;

  constructor(store: AccountStore, limits: Limits, clock: Clock) {
    this.#store = store;
    this.#limits = limits;
    this.#clock = clock;
    this.#lastUsedOwner = new Uint32Array(limits.maxKeys);
    this.#lastUsedWritten = new Uint32Array(limits.maxKeys);
    this.#pendingMs = new Float64Array(limits.maxKeys);
    this.#pendingOwner = new Uint32Array(limits.maxKeys);
  }

  /** Loads today's persisted counts of the active keys into their slots of the limit table. */
  load(): void {
    const now = this.#clock.now();
    const today = dayOf(now);
    for (const key of this.#store.activeKeys()) {
      const requests = this.#store.usage(key.id, today);
      if (requests > 0 && key.slot < this.#limits.maxKeys) this.#limits.loadKeyUsage(key.slot, key.id, now, requests);
    }
  }

  #dayName(unixDay: number): string {
    let name = this.#dayNames.get(unixDay);
    if (name === undefined) {
      if (this.#dayNames.size > 8) this.#dayNames.clear();
      name = dayOf(unixDay * DAY_MS);
      this.#dayNames.set(unixDay, name);
    }
    return name;
  }

  /** Writes the counts of every key counted since the previous flush; `final` (at shutdown) every last use too. */
  flush(final = false): void {
    const counts: { id: number; day: string; requests: number }[] = [];
    const lastUsed: { id: number; at: string }[] = [];
    const writeLastUsed = (slot: number, id: number, ms: number) => {
      lastUsed.push({ id, at: new Date(ms).toISOString() });
      this.#lastUsedOwner[slot] = id + 1;
      this.#lastUsedWritten[slot] = ms / 1000;
      this.#pendingMs[slot] = 0;
    };
    for (const k of this.#limits.takeDirty()) {
      if (k.id === null) continue;
      counts.push({ id: k.id, day: this.#dayName(k.day), requests: k.requests });
      if (k.rolled) counts.push({ id: k.id, day: this.#dayName(k.prevDay), requests: k.prevRequests });
      const written = this.#lastUsedOwner[k.slot] === k.id + 1 ? this.#lastUsedWritten[k.slot]! * 1000 : 0;
      if (k.lastUsedMs - written >= LAST_USED_STEP_MS) writeLastUsed(k.slot, k.id, k.lastUsedMs);
      else if (k.lastUsedMs !== 0) {
        this.#pendingMs[k.slot] = k.lastUsedMs;
        this.#pendingOwner[k.slot] = k.id + 1;
      }
    }
    if (final) {
      for (let slot = 0; slot < this.#pendingMs.length; slot++) {
        if (this.#pendingMs[slot] !== 0) writeLastUsed(slot, this.#pendingOwner[slot]! - 1, this.#pendingMs[slot]!);
      }
    }
    this.#store.recordUsage(counts, lastUsed);
  }
}
