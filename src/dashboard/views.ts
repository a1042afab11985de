/**
 * What the dashboard's JSON endpoints answer: an account's plan, its keys
 * with today's requests and last use, its daily usage, the data sources.
 *
 * Today's requests and the last use are the freshest the customer store
 * knows (CustomerStore.keyToday: with LMDB, the server's live limit table
 * too, so the pages show a call at once); the store holds the days before.
 */
import { IprError } from '../errors.js';
import { dayOf } from '../store/accounts.js';
import type { Account, CustomerStore, KeyRecord } from '../store/types.js';
import type { Clock } from '../clock.js';
import type { Plan } from '../plans.js';
import type { Snapshot } from '../snapshot.js';

const DAY_MS = 86_400_000;
export const USAGE_DAYS = 30;
/** Active keys an account may hold, and keys it may create in a day: every active key holds a slot of the limit table. */
export const MAX_ACTIVE_KEYS = 100;
export const MAX_KEYS_CREATED_PER_DAY = 100;
/** The share of the limit table the dashboard leaves to the operator's CLI. */
const OPERATOR_SLOTS = 0.1;

export interface ViewContext {
  store: CustomerStore;
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

export async function keyView(ctx: ViewContext, record: KeyRecord): Promise<KeyView> {
  const today = await ctx.store.keyToday(record, ctx.clock.now());
  return { name: record.name, prefix: record.prefix, created: record.created, last_used: today.lastUsed, requests_today: today.requests, allowed: record.allowed };
}

/** The account's active keys, oldest first, with its plan (whose limits apply to each key). */
export async function keysView(ctx: ViewContext, account: Account) {
  const keys = (await ctx.store.listKeys(account.email)).filter((k) => k.revoked === null);
  return { plan: planView(ctx, account.plan), keys: await Promise.all(keys.map((k) => keyView(ctx, k))) };
}

/**
 * Creates a key within the account's limits, the server's daily cap
 * (`keysPerDay` in 24 hours, every account together) and the slots of the
 * limit table the dashboard may take (all but a tenth); the answer holds the
 * key itself, shown once.
 */
export async function createKey(ctx: ViewContext, account: Account, name: unknown, allowed: unknown, keysPerDay: number): Promise<KeyView & { key: string }> {
  if (typeof name !== 'string') throw new IprError('invalid_request', 'a key needs a name');
  if (allowed !== undefined && !(Array.isArray(allowed) && allowed.every((a) => typeof a === 'string'))) {
    throw new IprError('invalid_request', 'allowed must be a list of addresses or CIDR prefixes');
  }
  const active = (await ctx.store.listKeys(account.email)).filter((k) => k.revoked === null).length;
  if (active >= MAX_ACTIVE_KEYS) throw new IprError('key_limit', `An account can have at most ${MAX_ACTIVE_KEYS} active keys; delete one first.`);
  const waitMs = await ctx.store.countAttempt([{ name: `keys:${account.email}`, max: MAX_KEYS_CREATED_PER_DAY, windowMs: DAY_MS }], ctx.clock.now());
  if (waitMs > 0) throw new IprError('key_limit', `An account can create at most ${MAX_KEYS_CREATED_PER_DAY} keys a day; try again later.`);
  if ((await ctx.store.countAttempt([{ name: 'keys', max: keysPerDay, windowMs: DAY_MS }], ctx.clock.now())) > 0) {
    await ctx.store.countRefusal('keys_per_day');
    throw new IprError('key_limit', `this server makes at most ${keysPerDay} keys a day in the dashboard; try again later.`);
  }
  const slots = await ctx.store.keySlots();
  const reserve = slots === null ? 0 : Math.ceil(slots * OPERATOR_SLOTS);
  const { key, record } = await ctx.store.createKey(account.email, name, (allowed as string[] | undefined) ?? [], reserve);
  return { key, ...(await keyView(ctx, record)) };
}

/**
 * Requests per day over the last USAGE_DAYS UTC days, oldest first: per key
 * (revoked keys too, while they have requests in the period) and in total.
 */
export async function usageView(ctx: ViewContext, account: Account) {
  const now = ctx.clock.now();
  const todayIndex = Math.floor(now / DAY_MS);
  const days = Array.from({ length: USAGE_DAYS }, (_, i) => dayOf((todayIndex - USAGE_DAYS + 1 + i) * DAY_MS));
  const all = await Promise.all(
    (await ctx.store.listKeys(account.email)).map(async (record) => {
      const counts = new Map((await ctx.store.usageRange(record, days[0]!, days[USAGE_DAYS - 2]!)).map((u) => [u.day, u.requests]));
      const requests = days.map((day) => counts.get(day) ?? 0);
      requests[USAGE_DAYS - 1] = (await ctx.store.keyToday(record, now)).requests;
      return { name: record.name, prefix: record.prefix, revoked: record.revoked, requests };
    }),
  );
  const keys = all.filter((k) => k.revoked === null || k.requests.some((n) => n > 0));
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
