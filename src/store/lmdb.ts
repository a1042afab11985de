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
import { AccountStore, dayOf, type Account, type AccountStatus, type KeyRecord, type Session } from './accounts.js';
import { admitSignIn, signInNames } from './sign-in.js';
import type {
  AttemptLimit,
  ChangeFeedHandlers,
  ChangeFollower,
  CustomerStore,
  DayUsage,
  KeyDirectory,
  KeyToday,
  LiveCounters,
  SignInAdmission,
  SignInRules,
} from './types.js';

const FOLLOW_POLL_MS = 250;
const DAY_MS = 86_400_000;

export class LmdbCustomerStore implements CustomerStore {
  readonly kind = 'lmdb';

  /** `live`: the counters of the server this process runs, when it runs one (keyToday adds them). */
  constructor(
    readonly store: AccountStore,
    readonly live: LiveCounters | null = null,
  ) {}

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

  setPassword(email: string, password: string): Promise<Account> {
    return this.store.setPassword(email, password);
  }

  async endSessions(email: string): Promise<Account> {
    return this.store.endSessions(email);
  }

  async createKey(email: string, name: string, allowed: string[] = [], reserve = 0): Promise<{ key: string; record: KeyRecord }> {
    return this.store.createKey(email, name, allowed, reserve);
  }

  async createKeys(email: string, names: string[], allowed: string[] = [], reserve = 0): Promise<{ key: string; record: KeyRecord }[]> {
    return this.store.createKeys(email, names, allowed, reserve);
  }

  async keySlots(): Promise<number> {
    return this.store.keySlots();
  }

  countRefusal(reason: string): Promise<void> {
    return this.store.countRefusal(reason);
  }

  async refusals(): Promise<Map<string, number>> {
    return this.store.refusals();
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

  /**
   * The live counters when they are about this key (its slot may be another
   * key's by now, or not yet this new key's) and today, else what the
   * server wrote (up to a second later: server/usage.ts).
   */
  async keyToday(key: KeyRecord, nowMs: number): Promise<KeyToday> {
    const slot = this.store.keyById(key.id)?.slot;
    const written = this.store.usage(key.id, dayOf(nowMs));
    const live = this.live !== null && slot !== undefined && slot < this.live.maxKeys ? this.live.readKey(slot) : null;
    if (live === null || live.id !== key.id) return { requests: written, lastUsed: key.lastUsed };
    const requests = live.day === Math.floor(nowMs / DAY_MS) ? Math.max(live.requests, written) : written;
    const liveLastUsed = live.lastUsedMs === 0 ? null : new Date(live.lastUsedMs).toISOString();
    const lastUsed = key.lastUsed === null || (liveLastUsed !== null && liveLastUsed > key.lastUsed) ? liveLastUsed : key.lastUsed;
    return { requests, lastUsed };
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

  admitSignIn(account: string, client: string, rules: SignInRules, nowMs: number): Promise<SignInAdmission> {
    const names = signInNames(account, client);
    return this.store.changeAttempts([names.pair, names.client, names.failures], (counts) => admitSignIn(counts, rules, nowMs));
  }

  async signInFailed(account: string, rules: SignInRules, nowMs: number): Promise<void> {
    await this.store.countAttempt([{ name: signInNames(account, '').failures, max: Infinity, windowMs: rules.windowMs }], nowMs);
  }

  signInSucceeded(account: string, client: string): Promise<void> {
    const names = signInNames(account, client);
    return this.store.changeAttempts([names.pair, names.client], ([, byClient]) => ({
      counts: [null, byClient === undefined || byClient.count <= 1 ? null : { ...byClient, count: byClient.count - 1 }],
      result: undefined,
    }));
  }

  pruneDashboardState(expired: (session: Session, account: Account | undefined) => boolean, nowMs: number): Promise<number> {
    return this.store.pruneDashboardState(expired, nowMs);
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
