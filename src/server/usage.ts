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
  /** Keys whose last use moved by less than the step since it was written: their slot and last use (Unix ms), by key id. */
  readonly #lastUsedPending = new Map<number, { slot: number; ms: number }>();

  constructor(store: AccountStore, limits: Limits, clock: Clock) {
    this.#store = store;
    this.#limits = limits;
    this.#clock = clock;
    this.#lastUsedOwner = new Uint32Array(limits.maxKeys);
    this.#lastUsedWritten = new Uint32Array(limits.maxKeys);
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

  /** Writes the counts of every key counted since the previous flush; `final` (at shutdown) every last use too. */
  flush(final = false): void {
    const counts: { id: number; day: string; requests: number }[] = [];
    const lastUsed: { id: number; at: string }[] = [];
    const writeLastUsed = (slot: number, id: number, ms: number) => {
      lastUsed.push({ id, at: new Date(ms).toISOString() });
      this.#lastUsedOwner[slot] = id + 1;
      this.#lastUsedWritten[slot] = ms / 1000;
      this.#lastUsedPending.delete(id);
    };
    for (const k of this.#limits.takeDirty()) {
      if (k.id === null) continue;
      counts.push({ id: k.id, day: dayOf(k.day * DAY_MS), requests: k.requests });
      if (k.rolled) counts.push({ id: k.id, day: dayOf(k.prevDay * DAY_MS), requests: k.prevRequests });
      const written = this.#lastUsedOwner[k.slot] === k.id + 1 ? this.#lastUsedWritten[k.slot]! * 1000 : 0;
      if (k.lastUsedMs - written >= LAST_USED_STEP_MS) writeLastUsed(k.slot, k.id, k.lastUsedMs);
      else if (k.lastUsedMs !== 0) this.#lastUsedPending.set(k.id, { slot: k.slot, ms: k.lastUsedMs });
    }
    if (final) for (const [id, { slot, ms }] of this.#lastUsedPending) writeLastUsed(slot, id, ms);
    this.#store.recordUsage(counts, lastUsed);
  }
}
