/**
 * Plans and their limits, from config/plans.json (or the file
 * IPR_PLANS_CONFIG names). The limits apply to each key separately.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { IprError } from './errors.js';

export interface Plan {
  name: string;
  /** null: no daily limit. */
  requestsPerDay: number | null;
  requestsPerSecond: number;
}

export const DEFAULT_PLANS_PATH = fileURLToPath(new URL('../config/plans.json', import.meta.url));

export function loadPlans(file: string = process.env.IPR_PLANS_CONFIG ?? DEFAULT_PLANS_PATH): Map<string, Plan> {
  let parsed: Record<string, unknown>;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
  } catch (error) {
    throw new IprError('invalid_argument', `plans ${file}: ${(error as Error).message}`);
  }
  const plans = new Map<string, Plan>();
  for (const [name, value] of Object.entries(parsed)) {
    if (name.startsWith('$')) continue;
    const v = value as { requests_per_day?: unknown; requests_per_second?: unknown };
    const perDay = v?.requests_per_day;
    const perSecond = v?.requests_per_second;
    const positive = (n: unknown): n is number => Number.isInteger(n) && (n as number) > 0 && (n as number) < 2 ** 31;
    if (!/^[a-z][a-z0-9_-]*$/.test(name) || !(perDay === null || positive(perDay)) || !positive(perSecond)) {
      throw new IprError('invalid_argument', `plans ${file}: plan "${name}" needs requests_per_day (a positive integer or null) and requests_per_second`);
    }
    plans.set(name, { name, requestsPerDay: perDay, requestsPerSecond: perSecond });
  }
  if (plans.size === 0) throw new IprError('invalid_argument', `plans ${file}: no plans`);
  return plans;
}
