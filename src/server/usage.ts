/**
 * Persists what the workers counted: every second the main thread copies each
 * slot's daily count, under the id of the key the slot's counts belong to (and the final count of the day before, after a
 * rollover) and its last use from the shared limit table into the account
 * store. A kill -9 loses at most the last second. On start the day's counts
 * are loaded back, so limits hold across restarts.
 */
import type { AccountStore } from '../store/accounts.js';
import { dayOf } from '../store/accounts.js';
import type { Clock } from '../clock.js';
import type { Limits } from './limits.js';

const DAY_MS = 86_400_000;

export class UsageRecorder {
  /** Key id -> what was last written: "day:count", and the last use written. */
  readonly #written = new Map<number, { count: string; prev: string; lastUsedMs: number }>();

  constructor(
    private readonly store: AccountStore,
    private readonly limits: Limits,
    private readonly clock: Clock,
  ) {}

  /** Loads today's persisted counts of the active keys into their slots of the limit table. */
  load(): void {
    const now = this.clock.now();
    const today = dayOf(now);
    for (const key of this.store.activeKeys()) {
      const requests = this.store.usage(key.id, today);
      if (requests > 0 && key.slot < this.limits.maxKeys) {
        this.limits.loadKeyUsage(key.slot, key.id, now, requests);
        this.#written.set(key.id, { count: `${Math.floor(now / DAY_MS)}:${requests}`, prev: '', lastUsedMs: 0 });
      }
    }
  }

  /** Writes every count and last use that changed since the previous flush. */
  flush(): void {
    const counts: { id: number; day: string; requests: number }[] = [];
    const lastUsed: { id: number; at: string }[] = [];
    const slots = Math.min(this.store.nextSlot(), this.limits.maxKeys);
    for (let slot = 0; slot < slots; slot++) {
      const k = this.limits.readKey(slot);
      if (k.id === null || k.day === 0) continue;
      const id = k.id;
      const done = this.#written.get(id) ?? { count: '', prev: '', lastUsedMs: 0 };
      const count = `${k.day}:${k.requests}`;
      const prev = `${k.prevDay}:${k.prevRequests}`;
      let changed = false;
      if (count !== done.count) {
        counts.push({ id, day: dayOf(k.day * DAY_MS), requests: k.requests });
        changed = true;
      }
      if (k.prevDay !== 0 && prev !== done.prev) {
        counts.push({ id, day: dayOf(k.prevDay * DAY_MS), requests: k.prevRequests });
        changed = true;
      }
      if (k.lastUsedMs > done.lastUsedMs) {
        lastUsed.push({ id, at: new Date(k.lastUsedMs).toISOString() });
        changed = true;
      }
      if (changed) this.#written.set(id, { count, prev, lastUsedMs: Math.max(k.lastUsedMs, done.lastUsedMs) });
    }
    this.store.recordUsage(counts, lastUsed);
  }
}
