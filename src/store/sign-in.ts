/**
 * The arithmetic of the dashboard's sign-in limits (dashboard/sign-in-limits.ts
 * says the rules and why), as every customer store applies it in one atomic
 * step: LMDB in one transaction (accounts.ts), Redis in a Lua script that
 * mirrors `admitSignIn` here (redis.ts).
 */
import { inWindow, type AttemptCount } from './accounts.js';
import type { SignInAdmission, SignInRules } from './types.js';

/** The attempt counters of a sign-in: per account and client, per client over every account, per account (its failures). */
export function signInNames(account: string, client: string): { pair: string; client: string; failures: string } {
  return { pair: `sign-in:pair:${account}:${client}`, client: `sign-in:address:${client}`, failures: `sign-in:account:${account}` };
}

/** The wait before an attempt on an account with `failures` failures in the window. */
export function signInDelay(failures: number, rules: SignInRules): number {
  return failures < rules.slowFromFailures ? 0 : Math.min(1000 * 2 ** (failures - rules.slowFromFailures), rules.maxWaitMs);
}

/**
 * One attempt over the counts of `signInNames` as they stand (in that
 * order): what to write (per name: a count, or undefined to leave it) and
 * the admission.
 */
export function admitSignIn(
  [pairCount, clientCount, accountCount]: (AttemptCount | undefined)[],
  rules: SignInRules,
  nowMs: number,
): { counts: (AttemptCount | undefined)[]; result: SignInAdmission } {
  const pair = inWindow(pairCount, nowMs, rules.windowMs);
  const byClient = inWindow(clientCount, nowMs, rules.windowMs);
  const full = [pair.count >= rules.maxPerAccountAndClient && pair, byClient.count >= rules.maxPerClient && byClient].filter((c): c is AttemptCount => c !== false);
  if (full.length > 0) return { counts: [], result: { refusedMs: Math.max(...full.map((c) => c.ends - nowMs)) } };
  const failures = inWindow(accountCount, nowMs, rules.windowMs);
  const delay = signInDelay(failures.count, rules);
  const counted: AttemptCount[] = [{ ...pair, count: pair.count + 1 }, { ...byClient, count: byClient.count + 1 }];
  if (delay === 0 || pair.count === 0) return { counts: counted, result: { waitMs: delay } };
  // A client that has failed on this account takes the account's next turn.
  const turn = Math.max(nowMs, failures.turn ?? 0) + delay;
  // `nowMs` is read before the store applies this step, so a later attempt's step may have run
  // first and set a turn from a later now: the next turn is never more than maxWaitMs away.
  if (turn - nowMs > rules.maxWaitMs) return { counts: [], result: { refusedMs: Math.min(turn - delay - nowMs, rules.maxWaitMs) } };
  return { counts: [...counted, { ...failures, turn }], result: { waitMs: turn - nowMs } };
}
