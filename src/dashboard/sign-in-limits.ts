/**
 * How many passwords anyone may try, and how fast, without handing an
 * attacker a switch that locks a customer out (issue 13, finding 2).
 *
 * - Per account and client (an IPv4 address, an IPv6 /64): 5 attempts in 15
 *   minutes, then 429 for that client on that account. A success clears it.
 * - Per client, over every account: 30 attempts in 15 minutes (a success
 *   takes its attempt back).
 * - Per account, over every client: never refused, only slowed. Its failed
 *   attempts are counted in 15-minute windows; from the 5th failure on,
 *   every attempt on the account waits before its password is checked,
 *   1 s, then 2, 4 and at most 8 s as failures add up. A client that has
 *   already failed on the account in the window also waits its turn: the
 *   account's turns are spaced by that delay, and a turn more than 8 s away
 *   is refused (429) for that client. A client without a failure on the
 *   account (the owner at home) is never refused: it waits the delay, at most
 *   8 s, and its right password signs in.
 *
 * So guessing is bounded per account whatever the number of addresses: one
 * guess per address and window comes with a wait of up to 8 s, and every
 * further guess queues for the account's turns, one per 8 s. All attempts
 * are counted before the password is checked, so parallel guesses on
 * several workers or nodes cannot slip past; the counts live in the customer
 * store (LMDB or Redis), shared by every worker, process and node.
 */
import { IprError } from '../errors.js';
import { signInNames } from '../store/sign-in.js';
import type { CustomerStore, SignInRules } from '../store/types.js';
import type { Clock } from '../clock.js';

export const SIGN_IN_WINDOW_MS = 15 * 60_000;
export const SIGN_IN_MAX_PER_ACCOUNT_AND_CLIENT = 5;
export const SIGN_IN_MAX_PER_CLIENT = 30;
/** Failures of an account (any client) after which its attempts are slowed. */
export const SLOW_FROM_FAILURES = 5;
/** The longest wait; below uWebSockets.js's 10 s timeout of a connection waiting for its answer. */
export const MAX_WAIT_MS = 8000;

/** The rules above, as the store applies them (store/sign-in.ts: one atomic step per attempt). */
const RULES: SignInRules = {
  windowMs: SIGN_IN_WINDOW_MS,
  maxPerAccountAndClient: SIGN_IN_MAX_PER_ACCOUNT_AND_CLIENT,
  maxPerClient: SIGN_IN_MAX_PER_CLIENT,
  slowFromFailures: SLOW_FROM_FAILURES,
  maxWaitMs: MAX_WAIT_MS,
};

function limited(waitMs: number): IprError {
  const seconds = Math.max(1, Math.ceil(waitMs / 1000));
  const minutes = Math.ceil(seconds / 60);
  return new IprError('sign_in_limited', `Too many sign-in attempts. Try again in ${minutes === 1 ? 'a minute' : `${minutes} minutes`}.`, { retry_after: seconds });
}

export class SignInLimits {
  constructor(
    private readonly store: CustomerStore,
    private readonly clock: Clock,
  ) {}

  /**
   * Counts an attempt of `client` on `account` before its password is
   * checked, and resolves after the wait it must make; throws IprError
   * sign_in_limited (details.retry_after in seconds) when it is refused.
   */
  async admit(account: string, client: string): Promise<void> {
    const admission = await this.store.admitSignIn(account, client, RULES, this.clock.now());
    if ('refusedMs' in admission) throw limited(admission.refusedMs);
    if (admission.waitMs > 0) await new Promise((resolve) => setTimeout(resolve, admission.waitMs));
  }

  /** Counts an attempt of `client` that names no account (a sign-up) against its limit over every account; throws sign_in_limited. */
  async admitClient(client: string): Promise<void> {
    const waitMs = await this.store.countAttempt([{ name: signInNames('', client).client, max: SIGN_IN_MAX_PER_CLIENT, windowMs: SIGN_IN_WINDOW_MS }], this.clock.now());
    if (waitMs > 0) throw limited(waitMs);
  }

  /** A wrong password: one more failure of the account. */
  failed(account: string): Promise<void> {
    return this.store.signInFailed(account, RULES, this.clock.now());
  }

  /** The right password: the client's count on the account is cleared, its attempt over every account taken back. */
  succeeded(account: string, client: string): Promise<void> {
    return this.store.signInSucceeded(account, client);
  }
}
