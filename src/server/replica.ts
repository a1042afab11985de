/**
 * A node's copy of the customers of a shared store (Redis), in the `replica`
 * folder of its data folder: what its worker threads read on the request
 * path, synchronously, with no round trip (the request path of the embedded
 * store, unchanged: api.ts reads a KeyDirectory and its change counter).
 *
 * It starts from every account and key in Redis, then follows the change
 * stream: each change names an account, whose state is read again from
 * Redis and written here in one transaction that bumps the change counter,
 * so workers drop what they cached at their next request. A revocation made
 * anywhere is refused here within the stream's delivery, a Redis read and an
 * LMDB commit: milliseconds (docs/DEPLOY.md states the guarantee).
 *
 * What a crash leaves behind: a replica as of some moment, read again in
 * full at the next start. While Redis cannot be reached the replica keeps
 * the last state it saw; the stream replays what was missed once it can
 * (or says it cannot, and everything is read again).
 */
import { IprError } from '../errors.js';
import type { AccountStore, SlottedKeyRecord } from '../store/accounts.js';
import type { RedisCustomerStore } from '../store/redis.js';
import type { Change, ChangeFollower } from '../store/types.js';

/** How long start() waits for the change stream before giving up (the store is unreachable). */
const FOLLOW_START_MS = 10_000;

export interface ReplicaOptions {
  /** Slots given back by keys revoked or gone: whatever the node kept for them is over. */
  onSlotsFreed?: (slots: number[]) => void;
  /** An account was written again (any change): its active keys as the replica now holds them. */
  onAccountMirrored?: (account: string, active: SlottedKeyRecord[]) => void;
  onError?: (error: unknown) => void;
}

export class CustomerReplica {
  #following: ChangeFollower | null = null;
  /** Changes applied since start, and full reads (for metrics and tests). */
  applied = 0;
  resyncs = 0;

  constructor(
    readonly shared: RedisCustomerStore,
    readonly local: AccountStore,
    private readonly options: ReplicaOptions = {},
  ) {}

  /**
   * Follows the stream from its end, then reads everything: a change made
   * during the full read is applied again after it (each application reads
   * the account's state as it is then, so the order does not matter).
   */
  async start(): Promise<void> {
    this.#following = await this.shared.follow(
      null,
      { change: (c) => this.#apply(c), resync: () => this.#resync() },
      (error) => this.options.onError?.(error),
    );
    const deadline = Date.now() + FOLLOW_START_MS;
    while (!this.#following.connected) {
      if (Date.now() >= deadline) {
        await this.close();
        throw new IprError('store_unavailable', `the customer store did not answer within ${FOLLOW_START_MS / 1000} s`);
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await this.#resync();
  }

  /** Whether the change stream is being read now (false while Redis cannot be reached). */
  get connected(): boolean {
    return this.#following?.connected ?? false;
  }

  /** The key in `slot` and its account, as the lease manager needs them; undefined when no active key holds it. */
  keyInSlot(slot: number): SlottedKeyRecord | undefined {
    return this.#bySlot.get(slot);
  }

  readonly #bySlot = new Map<number, SlottedKeyRecord>();

  async #mirror(email: string): Promise<void> {
    const account = await this.shared.account(email);
    const keys = account === undefined ? [] : await this.shared.listKeys(email);
    for (const old of this.local.account(email) === undefined ? [] : this.local.listKeys(email)) this.#bySlot.delete(old.slot);
    const freed = this.local.mirrorAccount(email, account, keys);
    const active = account === undefined ? [] : this.local.listKeys(email).filter((k) => k.revoked === null);
    for (const k of active) this.#bySlot.set(k.slot, k);
    if (freed.length > 0) this.options.onSlotsFreed?.(freed);
    this.options.onAccountMirrored?.(email, active);
  }

  async #apply(change: Change): Promise<void> {
    await this.#mirror(change.account);
    this.applied++;
  }

  /** Reads every account again; accounts gone from Redis are removed here. */
  async #resync(): Promise<void> {
    const upstream = await this.shared.listAccounts();
    const emails = new Set(upstream.map((a) => a.email));
    for (const a of upstream) await this.#mirror(a.email);
    for (const a of this.local.listAccounts()) if (!emails.has(a.email)) await this.#mirror(a.email);
    this.resyncs++;
  }

  async close(): Promise<void> {
    await this.#following?.close();
    this.#following = null;
  }
}
