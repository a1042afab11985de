/**
 * What a node runs on its main thread when its customers live in Redis
 * (`ipr serve --store redis://...`): the replica its workers authorise keys
 * from (replica.ts), the leases its workers admit requests from (leases.ts),
 * and the bound on how long it answers from them while Redis cannot be
 * reached.
 *
 * Past that bound (--store-max-stale) every keyed request is answered 503
 * `unavailable` with Retry-After until Redis answers again: a node that
 * cannot see revocations and plan changes stops vouching for keys. Within
 * it, keys the node holds leases for are served within its share of their
 * limits, and what it admits is added to Redis on recovery (leases.ts,
 * guarantee 4).
 */
import type { Logger } from '../log.js';
import type { Plan } from '../plans.js';
import { AccountStore } from '../store/accounts.js';
import { RedisCustomerStore } from '../store/redis.js';
import { createLeaseState, LeaseManager, LeaseTable, type SharedLeaseState } from './leases.js';
import { CustomerReplica } from './replica.js';

/**
 * Default --store-max-stale: long enough to ride out a Redis failover under
 * Sentinel (30 s to declare the master down by default, then an election)
 * or a restart, short enough that a node does not vouch for keys on a view
 * a minute old.
 */
export const DEFAULT_STORE_MAX_STALE_MS = 60_000;
const WATCH_MS = 100;
/**
 * Redis is asked whether it answers this often: a node whose keys all hold
 * long leases makes no other call, and its change stream's blocking read
 * notices a stall only after seconds.
 */
const PING_MS = 1000;

export interface SharedStoreStatus {
  /** Redis answers the lease calls and the change stream is followed. */
  up: boolean;
  /** Seconds since Redis last answered (0 while it does). */
  staleSeconds: number;
  /** Keyed requests are refused (503): stale past the bound. */
  refusing: boolean;
  /** Lease calls made, by why (leases.ts CallReason). */
  leaseCalls: Record<string, number>;
  changesApplied: number;
  resyncs: number;
}

export class SharedStoreNode {
  readonly leaseState: SharedLeaseState;
  readonly #table: LeaseTable;
  readonly #manager: LeaseManager;
  readonly #replica: CustomerReplica;
  readonly #watch: NodeJS.Timeout;
  #refusing = false;
  /** Since when the change stream has not been read (0: it is). */
  #streamLostSince = 0;
  /** When a PING last failed to be answered in time (0: the last one was). */
  #unansweredSince = 0;
  #lastPing = 0;
  #pinging = false;

  private constructor(
    readonly redis: RedisCustomerStore,
    readonly replica: AccountStore,
    plans: Map<string, Plan>,
    private readonly maxStaleMs: number,
    private readonly log: Logger,
  ) {
    this.leaseState = createLeaseState(replica.keySlots());
    this.#table = new LeaseTable(this.leaseState);
    const leasedKey = (slot: number) => {
      const key = this.#replica.keyInSlot(slot);
      const account = key === undefined ? undefined : replica.account(key.account);
      const plan = account === undefined ? undefined : plans.get(account.plan);
      return key === undefined || plan === undefined ? undefined : { id: key.id, account: key.account, plan };
    };
    this.#manager = new LeaseManager(redis.connection, this.#table, {
      keyInSlot: leasedKey,
      onError: (error) => log.debug({ err: error }, 'a lease call failed; retrying'),
    });
    this.#replica = new CustomerReplica(redis, replica, {
      onSlotsFreed: (slots) => slots.forEach((slot) => void this.#manager.forget(slot)),
      // Another plan, or a suspension lifted: the manager gives back leases taken under the old state.
      onAccountMirrored: (_account, active) => {
        for (const key of active) {
          const leased = leasedKey(key.slot);
          if (leased !== undefined) this.#manager.refresh(key.slot, leased);
        }
      },
      onError: (error) => log.warn({ err: error }, 'the customer change stream failed; following it again'),
    });
    this.#watch = setInterval(() => this.#check(), WATCH_MS);
  }

  /** Connects, reads every customer into the replica and starts following; throws store_unavailable when Redis does not answer. */
  static async open(url: string, dataDir: string, plans: Map<string, Plan>, options: { maxStaleMs: number; log: Logger; maxKeys?: number }): Promise<SharedStoreNode> {
    const redis = await RedisCustomerStore.open(url);
    const replica = new AccountStore(dataDir, (message) => options.log.warn({ event: 'file_mode' }, message), 'replica');
    let node: SharedStoreNode | null = null;
    try {
      if (options.maxKeys !== undefined) replica.setKeySlots(options.maxKeys);
      node = new SharedStoreNode(redis, replica, plans, options.maxStaleMs, options.log);
      await node.#replica.start();
      node.#manager.start();
      return node;
    } catch (error) {
      if (node !== null) await node.close();
      else await Promise.all([replica.close(), redis.close()]);
      throw error;
    }
  }

  /** Since when Redis has not answered the leases, the stream or the pings (0: it answers all three). */
  #staleSince(): number {
    const since = [this.#manager.staleSince, this.#streamLostSince, this.#unansweredSince].filter((t) => t !== 0);
    return since.length === 0 ? 0 : Math.min(...since);
  }

  #ping(): void {
    if (this.#pinging || Date.now() - this.#lastPing < PING_MS) return;
    this.#pinging = true;
    this.#lastPing = Date.now();
    const sent = this.#lastPing;
    this.redis.connection.command(undefined, ['PING']).then(
      () => {
        this.#unansweredSince = 0;
        this.#manager.storeAnswered();
      },
      () => {
        this.#unansweredSince ||= sent;
        this.#manager.storeUnanswered(sent);
      },
    ).finally(() => (this.#pinging = false));
  }

  #check(): void {
    this.#ping();
    if (this.#replica.connected) this.#streamLostSince = 0;
    else this.#streamLostSince ||= Date.now();
    const since = this.#staleSince();
    const refusing = since !== 0 && Date.now() - since > this.maxStaleMs;
    if (refusing === this.#refusing) return;
    this.#refusing = refusing;
    this.#table.setRefusing(refusing);
    if (refusing) this.log.error({ event: 'store', stale_ms: Date.now() - since }, 'the customer store has been unreachable past --store-max-stale: answering 503 until it is back');
    else this.log.info({ event: 'store' }, 'the customer store answers again: serving keys');
  }

  status(): SharedStoreStatus {
    const since = this.#staleSince();
    return {
      up: since === 0,
      staleSeconds: since === 0 ? 0 : (Date.now() - since) / 1000,
      refusing: this.#refusing,
      leaseCalls: { ...this.#manager.callsBy },
      changesApplied: this.#replica.applied,
      resyncs: this.#replica.resyncs,
    };
  }

  /** Gives back what the node holds and reports its usage (each call within the command time limit), then disconnects. */
  async close(): Promise<void> {
    clearInterval(this.#watch);
    await this.#manager.close();
    await this.#replica.close();
    await this.redis.close();
    await this.replica.close();
  }
}
