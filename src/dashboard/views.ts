/**
 * What the dashboard's JSON endpoints answer: an account's plan, its keys
 * with today's requests and last use, its daily usage, the data sources.
 *
 * Today's requests and the last use come from the server's live limit table
 * (limits.ts), so the pages show a call at once; the account store has them
 * too, up to a second later (usage.ts), and holds the days before.
 */
import { IprError } from '../errors.js';
import { dayOf, type Account, type AccountStore, type KeyRecord } from '../store/accounts.js';
import type { Clock } from '../clock.js';
import type { Plan } from '../plans.js';
import type { Snapshot } from '../snapshot.js';

const DAY_MS = 86_400_000;
export const USAGE_DAYS = 30;
/** Active keys an account may hold, and keys it may create in a day: every key takes a slot of the limit table for good. */
export const MAX_ACTIVE_KEYS = 100;
export const MAX_KEYS_CREATED_PER_DAY = 100;

/** What the server counted for a key so far (its live limit counters). */
export interface LiveCounters {
  /** Keys with an id from here on have no counters. */
  maxKeys: number;
  /** The current day and its count, last use in Unix ms (0: never); days as Unix days. */
  readKey(id: number): { day: number; requests: number; lastUsedMs: number };
}

export interface ViewContext {
  store: AccountStore;
  limits: LiveCounters;
  plans: Map<string, Plan>;
  clock: Clock;
  snapshot: Snapshot;
}

export interface PlanView {
  name: string;
  /** null: no daily limit. */
  requests_per_day: number | null;
  /** null: the plan is not configured on this server (the API answers 403). */
  requests_per_second: number | null;
}

export interface KeyView {
  name: string;
  prefix: string;
  created: string;
  last_used: string | null;
  requests_today: number;
  allowed: string[];
}

export function planView(ctx: ViewContext, name: string): PlanView {
  const plan = ctx.plans.get(name);
  return { name, requests_per_day: plan?.requestsPerDay ?? null, requests_per_second: plan?.requestsPerSecond ?? null };
}

export function accountView(ctx: ViewContext, account: Account, csrf: string) {
  return { email: account.email, created: account.created, plan: planView(ctx, account.plan), csrf_token: csrf };
}

/** Today's count and the last use of a key: the live counters when they are about today, else the store's. */
function liveUsage(ctx: ViewContext, record: KeyRecord): { today: number; lastUsed: string | null } {
  const now = ctx.clock.now();
  const stored = ctx.store.usage(record.id, dayOf(now));
  if (record.id >= ctx.limits.maxKeys) return { today: stored, lastUsed: record.lastUsed };
  const live = ctx.limits.readKey(record.id);
  const today = live.day === Math.floor(now / DAY_MS) ? Math.max(live.requests, stored) : stored;
  const liveLastUsed = live.lastUsedMs === 0 ? null : new Date(live.lastUsedMs).toISOString();
  const lastUsed = record.lastUsed === null || (liveLastUsed !== null && liveLastUsed > record.lastUsed) ? liveLastUsed : record.lastUsed;
  return { today, lastUsed };
}

export function keyView(ctx: ViewContext, record: KeyRecord): KeyView {
  const { today, lastUsed } = liveUsage(ctx, record);
  return { name: record.name, prefix: record.prefix, created: record.created, last_used: lastUsed, requests_today: today, allowed: record.allowed };
}

/** The account's active keys, oldest first, with its plan (whose limits apply to each key). */
export function keysView(ctx: ViewContext, account: Account) {
  const keys = ctx.store.listKeys(account.email).filter((k) => k.revoked === null);
  return { plan: planView(ctx, account.plan), keys: keys.map((k) => keyView(ctx, k)) };
}

/** Creates a key within the account's limits; the answer holds the key itself, shown once. */
export async function createKey(ctx: ViewContext, account: Account, name: unknown, allowed: unknown): Promise<KeyView & { key: string }> {
  if (typeof name !== 'string') throw new IprError('invalid_request', 'a key needs a name');
  if (allowed !== undefined && !(Array.isArray(allowed) && allowed.every((a) => typeof a === 'string'))) {
    throw new IprError('invalid_request', 'allowed must be a list of addresses or CIDR prefixes');
  }
  const active = ctx.store.listKeys(account.email).filter((k) => k.revoked === null).length;
  if (active >= MAX_ACTIVE_KEYS) throw new IprError('key_limit', `An account can have at most ${MAX_ACTIVE_KEYS} active keys; delete one first.`);
  const waitMs = await ctx.store.countAttempt([{ name: `keys:${account.email}`, max: MAX_KEYS_CREATED_PER_DAY, windowMs: DAY_MS }], ctx.clock.now());
  if (waitMs > 0) throw new IprError('key_limit', `An account can create at most ${MAX_KEYS_CREATED_PER_DAY} keys a day; try again later.`);
  const { key, record } = ctx.store.createKey(account.email, name, (allowed as string[] | undefined) ?? []);
  return { key, ...keyView(ctx, record) };
}

/**
 * Requests per day over the last USAGE_DAYS UTC days, oldest first: per key
 * (revoked keys too, while they have requests in the period) and in total.
 */
export function usageView(ctx: ViewContext, account: Account) {
  const now = ctx.clock.now();
  const todayIndex = Math.floor(now / DAY_MS);
  const days = Array.from({ length: USAGE_DAYS }, (_, i) => dayOf((todayIndex - USAGE_DAYS + 1 + i) * DAY_MS));
  const keys = ctx.store
    .listKeys(account.email)
    .map((record) => {
      const counts = new Map(ctx.store.usageRange(record.id, days[0]!, days[USAGE_DAYS - 1]!).map((u) => [u.day, u.requests]));
      const requests = days.map((day) => counts.get(day) ?? 0);
      requests[USAGE_DAYS - 1] = liveUsage(ctx, record).today;
      return { name: record.name, prefix: record.prefix, revoked: record.revoked, requests };
    })
    .filter((k) => k.revoked === null || k.requests.some((n) => n > 0));
  const total = days.map((_, i) => keys.reduce((sum, k) => sum + k.requests[i]!, 0));
  return { plan: planView(ctx, account.plan), days, keys, total };
}

/** The sources of the snapshot being served, by license (names and kinds only: never where the operator keeps them). */
export function sourcesView(ctx: ViewContext) {
  const info = ctx.snapshot.info();
  const meta = info.meta as { sources?: { name: string; kind: string; license?: string }[] };
  const byLicense = new Map<string, { license: string; kinds: Set<string>; sources: string[] }>();
  for (const s of meta.sources ?? []) {
    const license = s.license ?? 'not stated';
    const entry = byLicense.get(license) ?? { license, kinds: new Set(), sources: [] };
    entry.kinds.add(s.kind);
    entry.sources.push(s.name);
    byLicense.set(license, entry);
  }
  return {
    built_at: info.built_at,
    licenses: [...byLicense.values()].map((e) => ({ license: e.license, kinds: [...e.kinds], sources: e.sources })),
  };
}
