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
 * several workers cannot slip past; the counts live in the account store,
 * shared by every worker and process.
 */
import { IprError } from '../errors.js';
import { inWindow, type AccountStore, type AttemptCount } from '../store/accounts.js';
import type { Clock } from '../clock.js';

export const SIGN_IN_WINDOW_MS = 15 * 60_000;
export const SIGN_IN_MAX_PER_ACCOUNT_AND_CLIENT = 5;
export const SIGN_IN_MAX_PER_CLIENT = 30;
/** Failures of an account (any client) after which its attempts are slowed. */
export const SLOW_FROM_FAILURES = 5;
/** The longest wait; below uWebSockets.js's 10 s timeout of a connection waiting for its answer. */
export const MAX_WAIT_MS = 8000;

/** The wait before an attempt on an account with `failures` failures in the window. */
export function delayAfter(failures: number): number {
  return failures < SLOW_FROM_FAILURES ? 0 : Math.min(1000 * 2 ** (failures - SLOW_FROM_FAILURES), MAX_WAIT_MS);
}

const names = (account: string, client: string) => [`sign-in:pair:${account}:${client}`, `sign-in:address:${client}`, `sign-in:account:${account}`];

function limited(waitMs: number): IprError {
  const seconds = Math.max(1, Math.ceil(waitMs / 1000));
  const minutes = Math.ceil(seconds / 60);
  return new IprError('sign_in_limited', `Too many sign-in attempts. Try again in ${minutes === 1 ? 'a minute' : `${minutes} minutes`}.`, { retry_after: seconds });
}

export class SignInLimits {
  constructor(
    private readonly store: AccountStore,
    private readonly clock: Clock,
  ) {}

  /**
   * Counts an attempt of `client` on `account` before its password is
   * checked, and resolves after the wait it must make; throws IprError
   * sign_in_limited (details.retry_after in seconds) when it is refused.
   */
  async admit(account: string, client: string): Promise<void> {
    const now = this.clock.now();
    const waitMs = await this.store.changeAttempts<{ refused: number } | { wait: number }>(names(account, client), ([pairCount, clientCount, accountCount]) => {
      const pair = inWindow(pairCount, now, SIGN_IN_WINDOW_MS);
      const byClient = inWindow(clientCount, now, SIGN_IN_WINDOW_MS);
      const full = [pair.count >= SIGN_IN_MAX_PER_ACCOUNT_AND_CLIENT && pair, byClient.count >= SIGN_IN_MAX_PER_CLIENT && byClient].filter((c): c is AttemptCount => c !== false);
      if (full.length > 0) return { counts: [], result: { refused: Math.max(...full.map((c) => c.ends - now)) } };
      const failures = inWindow(accountCount, now, SIGN_IN_WINDOW_MS);
      const delay = delayAfter(failures.count);
      const counted: AttemptCount[] = [{ ...pair, count: pair.count + 1 }, { ...byClient, count: byClient.count + 1 }];
      if (delay === 0 || pair.count === 0) return { counts: counted, result: { wait: delay } };
      // A client that has failed on this account takes the account's next turn.
      const turn = Math.max(now, failures.turn ?? 0) + delay;
      if (turn - now > MAX_WAIT_MS) return { counts: [], result: { refused: turn - delay - now } };
      return { counts: [...counted, { ...failures, turn }], result: { wait: turn - now } };
    });
    if ('refused' in waitMs) throw limited(waitMs.refused);
    if (waitMs.wait > 0) await new Promise((resolve) => setTimeout(resolve, waitMs.wait));
  }

  /** Counts an attempt of `client` that names no account (a sign-up) against its limit over every account; throws sign_in_limited. */
  async admitClient(client: string): Promise<void> {
    const waitMs = await this.store.countAttempt([{ name: names('', client)[1]!, max: SIGN_IN_MAX_PER_CLIENT, windowMs: SIGN_IN_WINDOW_MS }], this.clock.now());
    if (waitMs > 0) throw limited(waitMs);
  }

  /** A wrong password: one more failure of the account. */
  failed(account: string): Promise<void> {
    const now = this.clock.now();
    return this.store.changeAttempts([names(account, '')[2]!], ([c]) => {
      const failures = inWindow(c, now, SIGN_IN_WINDOW_MS);
      return { counts: [{ ...failures, count: failures.count + 1 }], result: undefined };
    });
  }

  /** The right password: the client's count on the account is cleared, its attempt over every account taken back. */
  succeeded(account: string, client: string): Promise<void> {
    return this.store.changeAttempts(names(account, client).slice(0, 2), ([, byClient]) => ({
      counts: [null, byClient === undefined || byClient.count <= 1 ? null : { ...byClient, count: byClient.count - 1 }],
      result: undefined,
    }));
  }
}
