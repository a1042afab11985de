/**
 * The time limits and usage are counted in. Normally the system clock; with
 * `ipr serve --clock FILE` (for tests) a time every thread reads from shared
 * memory, which the main thread sets from FILE (Unix milliseconds or an ISO
 * date) whenever the file changes: day rollover and per-second windows can
 * then be tested without waiting or racing.
 */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

export class SharedClock implements Clock {
  readonly #time: Float64Array;

  constructor(readonly buffer: SharedArrayBuffer = new SharedArrayBuffer(8)) {
    this.#time = new Float64Array(buffer);
  }

  now(): number {
    return this.#time[0]!;
  }

  set(ms: number): void {
    this.#time[0] = ms;
  }
}

/** Parses a clock file's text: Unix milliseconds or an ISO date. */
export function parseClockText(text: string): number | null {
  const t = text.trim();
  const ms = /^[0-9]+$/.test(t) ? Number(t) : Date.parse(t);
  return Number.isFinite(ms) ? ms : null;
}

/** "1h", "15m", "90s", "1d" or a number of seconds, in milliseconds; null when not a duration. */
export function parseDuration(text: string): number | null {
  const match = /^([0-9]+(?:\.[0-9]+)?)(s|m|h|d)?$/.exec(text.trim());
  if (match === null) return null;
  const ms = Number(match[1]) * { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[(match[2] ?? 's') as 's']!;
  return ms >= 1000 ? ms : null;
}
