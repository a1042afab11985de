/**
 * Persists what the workers counted: every second the main thread takes the
 * keys admitted since the last flush (the limit table's dirty ring: the cost
 * follows the keys that changed, not the size of the table) and writes each
 * one's daily count (and the final count of the day before, after a
 * rollover) to the account store. A kill -9 loses at most the last second.
 * On start the day's counts are loaded back, so limits hold across restarts.
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
  /** The last use written per key id, in Unix seconds (0: none). */
  readonly #lastUsedWritten: Uint32Array;
  /** Keys whose last use moved by less than the step since it was written: Unix ms by id. */
  readonly #lastUsedPending = new Map<number, number>();

  constructor(store: AccountStore, limits: Limits, clock: Clock) {
    this.#store = store;
    this.#limits = limits;
    this.#clock = clock;
    this.#lastUsedWritten = new Uint32Array(limits.maxKeys);
  }

  /** Loads today's persisted counts into the limit table. */
  load(): void {
    const now = this.#clock.now();
    const today = dayOf(now);
    const keys = Math.min(this.#store.nextKeyId(), this.#limits.maxKeys);
    for (let id = 0; id < keys; id++) {
      const requests = this.#store.usage(id, today);
      if (requests > 0) this.#limits.loadKeyUsage(id, now, requests);
    }
  }

  /** Writes the counts of every key counted since the previous flush; `final` (at shutdown) every last use too. */
  flush(final = false): void {
    const counts: { id: number; day: string; requests: number }[] = [];
    const lastUsed: { id: number; at: string }[] = [];
    const writeLastUsed = (id: number, ms: number) => {
      lastUsed.push({ id, at: new Date(ms).toISOString() });
      this.#lastUsedWritten[id] = ms / 1000;
      this.#lastUsedPending.delete(id);
    };
    for (const k of this.#limits.takeDirty()) {
      counts.push({ id: k.id, day: dayOf(k.day * DAY_MS), requests: k.requests });
      if (k.rolled) counts.push({ id: k.id, day: dayOf(k.prevDay * DAY_MS), requests: k.prevRequests });
      if (k.lastUsedMs - this.#lastUsedWritten[k.id]! * 1000 >= LAST_USED_STEP_MS) writeLastUsed(k.id, k.lastUsedMs);
      else if (k.lastUsedMs !== 0) this.#lastUsedPending.set(k.id, k.lastUsedMs);
    }
    if (final) for (const [id, ms] of this.#lastUsedPending) writeLastUsed(id, ms);
    this.#store.recordUsage(counts, lastUsed);
  }
}
