/**
 * Risk score and recommendation (docs/API.md "Risk score"): the points of every flag an
 * address has, summed and capped; the recommendation follows two thresholds.
 * Weights and thresholds live in config/risk.json; an operator may point
 * IPR_RISK_CONFIG (or the `riskConfig` option) at another file.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { IprError } from './errors.js';
import { FLAG_BIT, FLAG_TABLES, type FlagField, type Recommendation } from './result.js';

export type { Recommendation } from './result.js';

export interface RiskConfig {
  /** By the check result's field of each flag. */
  points: Record<FlagField, number>;
  cap: number;
  verify_from: number;
  block_from: number;
}

export interface Risk {
  score: number;
  recommendation: Recommendation;
}

export const DEFAULT_RISK_CONFIG_PATH = fileURLToPath(new URL('../config/risk.json', import.meta.url));

export function loadRiskConfig(file: string = process.env.IPR_RISK_CONFIG ?? DEFAULT_RISK_CONFIG_PATH): RiskConfig {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'));
  } catch (error) {
    throw new IprError('invalid_argument', `risk configuration ${file}: ${(error as Error).message}`);
  }
  const c = parsed as RiskConfig;
  const numbers = [c?.cap, c?.verify_from, c?.block_from, ...Object.values(c?.points ?? {})];
  const keys = FLAG_TABLES.map((flag): FlagField => `is_${flag}`);
  if (
    !keys.every((k) => Number.isInteger((c.points as Record<string, unknown>)?.[k])) ||
    !numbers.every((n) => Number.isInteger(n) && (n as number) >= 0 && (n as number) <= 100) ||
    c.verify_from > c.block_from
  ) {
    throw new IprError(
      'invalid_argument',
      `risk configuration ${file}: needs integer points for ${keys.join(', ')}, cap, verify_from <= block_from, all 0-100`,
    );
  }
  return c;
}

/** The risk of each of the 32 flag combinations, indexed by flag bits. */
export function riskTable(config: RiskConfig): Risk[] {
  const table: Risk[] = [];
  for (let flags = 0; flags < 1 << FLAG_TABLES.length; flags++) {
    let sum = 0;
    for (const flag of FLAG_TABLES) if (flags & FLAG_BIT[flag]) sum += config.points[`is_${flag}`];
    const score = Math.min(sum, config.cap);
    const recommendation: Recommendation =
      score >= config.block_from ? 'block' : score >= config.verify_from ? 'verify' : 'allow';
    table.push(Object.freeze({ score, recommendation }));
  }
  return table;
}
