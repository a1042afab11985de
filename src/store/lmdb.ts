/**
 * The embedded LMDB store of one data folder (accounts.ts) behind the store
 * interface (types.ts), so that routes, the dashboard and the CLI can be
 * written once for both stores.
 *
 * Its change feed cannot say what changed: the store keeps a change counter that
 * every change bumps, not a log. Followers are told to resync whenever the
 * counter moves (checked every FOLLOW_POLL_MS), which is what the server has
 * always done with it (drop every cached key).
 */
import { AccountStore, type Account, type AccountStatus, type KeyRecord, type Session } from './accounts.js';
import type { AttemptLimit, ChangeFeedHandlers, ChangeFollower, CustomerStore, DayUsage, KeyDirectory } from './types.js';

const FOLLOW_POLL_MS = 250;

export class LmdbCustomerStore implements CustomerStore {
  readonly kind = 'lmdb';

  constructor(readonly store: AccountStore) {}

  static open(dataDir: string): LmdbCustomerStore {
    return new LmdbCustomerStore(new AccountStore(dataDir));
  }

  /** What the request path reads: the LMDB store itself, synchronous (each worker opens its own). */
  get directory(): KeyDirectory {
    return this.store;
  }

  async account(email: string): Promise<Account | undefined> {
    return this.store.account(email);
  }

  async listAccounts(): Promise<Account[]> {
    return this.store.listAccounts();
  }

  createAccount(email: string, password: string, plan: string): Promise<Account> {
    return this.store.createAccount(email, password, plan);
  }

  verifyPassword(email: string, password: string): Promise<Account | undefined> {
    return this.store.verifyPassword(email, password);
  }

  async setPlan(email: string, plan: string): Promise<Account> {
    return this.store.setPlan(email, plan);
  }

  async setStatus(email: string, status: AccountStatus): Promise<Account> {
    return this.store.setStatus(email, status);
  }

  async createKey(email: string, name: string, allowed: string[] = []): Promise<{ key: string; record: KeyRecord }> {
    return this.store.createKey(email, name, allowed);
  }

  async keyByDigest(digest: string): Promise<KeyRecord | undefined> {
    return this.store.keyByDigest(digest);
  }

  async listKeys(email: string): Promise<KeyRecord[]> {
    return this.store.listKeys(email);
  }

  async revokeKey(email: string, prefix: string): Promise<KeyRecord> {
    return this.store.revokeKey(email, prefix);
  }

  async setAllowed(email: string, prefix: string, allowed: string[]): Promise<KeyRecord> {
    return this.store.setAllowed(email, prefix, allowed);
  }

  async usageRange(key: Pick<KeyRecord, 'id' | 'account'>, fromDay: string, toDay: string): Promise<DayUsage[]> {
    return this.store.usageRange(key.id, fromDay, toDay).filter((u) => u.requests > 0);
  }

  /** LMDB has no TTLs: the dashboard's prune (pruneDashboardState) removes sessions past their expiry. */
  createSession(session: Session, _ttlMs: number): Promise<string> {
    return this.store.createSession(session);
  }

  async session(id: string): Promise<Session | undefined> {
    return this.store.session(id);
  }

  async touchSession(id: string, session: Session, seen: number, _ttlMs: number): Promise<void> {
    await this.store.touchSession(id, session, seen);
  }

  endSession(id: string): Promise<void> {
    return this.store.endSession(id);
  }

  countAttempt(limits: AttemptLimit[], nowMs: number): Promise<number> {
    return this.store.countAttempt(limits, nowMs);
  }

  forgetAttempt(name: string, all = false): Promise<void> {
    return this.store.changeAttempts([name], ([c]) => ({ counts: [c === undefined ? undefined : all || c.count <= 1 ? null : { ...c, count: c.count - 1 }], result: undefined }));
  }

  async follow(from: string | null, handlers: ChangeFeedHandlers): Promise<ChangeFollower> {
    let seen = from === null ? this.store.changeCount() : Number(from);
    let closed = false;
    let polling = Promise.resolve();
    const timer = setInterval(() => {
      polling = polling.then(async () => {
        const version = this.store.changeCount();
        if (closed || version === seen) return;
        seen = version;
        await handlers.resync();
      });
    }, FOLLOW_POLL_MS);
    return {
      get position() {
        return String(seen);
      },
      connected: true,
      async close() {
        closed = true;
        clearInterval(timer);
        await polling;
      },
    };
  }

  close(): Promise<void> {
    return this.store.close();
  }
}
