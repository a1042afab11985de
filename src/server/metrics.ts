/**
 * Request metrics, counted by the worker threads without allocating and read
 * by the main thread's Prometheus collectors (admin.ts) at scrape time.
 *
 * Each worker owns a slice of one SharedArrayBuffer (its own cache lines, so
 * workers never contend) of 32-bit counters: requests by route and status,
 * latency histogram buckets by route, latency sums, limit rejections. A
 * request costs a few Atomics.add. The counters wrap at 2^32; the reader
 * folds their progress into running totals (doubles, exact to 2^53) and is
 * called every minute, long before a counter can wrap twice (71 minutes at a
 * million requests a second per worker).
 * A latency sum can grow by more than 2^32 microseconds between two reads
 * (thousands of slow requests in flight), so it is 64 bits: a low word and a
 * carry word, added just after the low word wraps; a reader that comes
 * between the two sees a sum 2^32 too small and keeps the one it read before.
 */

/** Route labels; the index is what workers count with. */
export const ROUTES = ['/v1/check', '/v1/check/batch', '/v1/health', '/v1/openapi.json', 'other'] as const;
export const Route = { Check: 0, Batch: 1, Health: 2, OpenApi: 3, Other: 4 } as const;

/** Status labels: every status the API answers, and 0 for a request whose client went away first ("aborted"). */
export const STATUSES = [200, 400, 401, 403, 404, 405, 413, 415, 429, 500, 503, 0] as const;

/** Upper bounds of the latency buckets, microseconds (the last bucket, +Inf, is implicit). */
export const LATENCY_BOUNDS_US = [50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000] as const;

/** Which limit refused a request. */
export const LIMITS = ['day', 'second', 'address'] as const;
export const Limit = { Day: 0, Second: 1, Address: 2 } as const;

const R = ROUTES.length;
const S = STATUSES.length;
const B = LATENCY_BOUNDS_US.length + 1;
const REQUESTS = 0;
const BUCKETS = REQUESTS + R * S;
const SUM_LOW = BUCKETS + R * B;
const SUM_HIGH = SUM_LOW + R;
const LIMITED = SUM_HIGH + R;
const USED = LIMITED + LIMITS.length;
/** Words per worker, rounded up to whole 64-byte cache lines. */
const SLICE = Math.ceil(USED / 16) * 16;

/** Index of a status in STATUSES, by status code (an unknown code counts as 500). */
const STATUS_INDEX = new Uint8Array(600).fill(STATUSES.indexOf(500));
STATUSES.forEach((status, i) => (STATUS_INDEX[status] = i));

export function createMetricsBuffer(workers: number): SharedArrayBuffer {
  return new SharedArrayBuffer(workers * SLICE * 4);
}

const MICROS_WRAP = 2 ** 30;

/**
 * Now in microseconds, modulo 2^30 (about 18 minutes): a small integer, so
 * keeping it in a request's state allocates nothing. {@link elapsedMicros}
 * undoes the wrap.
 */
export function nowMicros(): number {
  return Math.floor(performance.now() * 1000) % MICROS_WRAP;
}

export function elapsedMicros(since: number): number {
  return (nowMicros() - since + MICROS_WRAP) % MICROS_WRAP;
}

/** The counting side, one per worker thread. */
export class WorkerMetrics {
  readonly #words: Uint32Array;

  constructor(buffer: SharedArrayBuffer, worker: number) {
    this.#words = new Uint32Array(buffer, worker * SLICE * 4, SLICE);
  }

  /** One request answered (status 0: its client went away), after `micros` in the server. */
  request(route: number, status: number, micros: number): void {
    const w = this.#words;
    Atomics.add(w, REQUESTS + route * S + STATUS_INDEX[status]!, 1);
    let bucket = 0;
    while (bucket < B - 1 && micros > LATENCY_BOUNDS_US[bucket]!) bucket++;
    Atomics.add(w, BUCKETS + route * B + bucket, 1);
    const before = Atomics.add(w, SUM_LOW + route, micros);
    if (before + micros > 0xffffffff) Atomics.add(w, SUM_HIGH + route, 1);
  }

  /** One request refused by a limit (a Limit value). */
  limited(limit: number): void {
    Atomics.add(this.#words, LIMITED + limit, 1);
  }
}

export interface MetricsTotals {
  /** [route][status index] */
  requests: number[][];
  /** [route][bucket], not cumulative; the last bucket is +Inf. */
  buckets: number[][];
  /** [route] seconds */
  seconds: number[];
  /** [limit] */
  limited: number[];
}

/** The reading side, on the main thread. */
export class MetricsReader {
  readonly #words: Uint32Array;
  readonly #last: Uint32Array;
  readonly #totals: Float64Array;
  /** The latency sums last read, per worker and route, microseconds. */
  readonly #sums: Float64Array;
  readonly #workers: number;

  constructor(buffer: SharedArrayBuffer) {
    this.#words = new Uint32Array(buffer);
    this.#workers = this.#words.length / SLICE;
    this.#last = new Uint32Array(this.#words.length);
    this.#totals = new Float64Array(SLICE);
    this.#sums = new Float64Array(this.#workers * R);
  }

  /** Folds the counters' progress since the last call into the totals (call every minute at least). */
  fold(): void {
    for (let worker = 0; worker < this.#workers; worker++) {
      const base = worker * SLICE;
      for (let i = 0; i < USED; i++) {
        if (i >= SUM_LOW && i < LIMITED) continue;
        const now = Atomics.load(this.#words, base + i);
        this.#totals[i]! += (now - this.#last[base + i]!) >>> 0;
        this.#last[base + i] = now;
      }
    }
  }

  /** Every total now; latency sums in seconds. */
  read(): MetricsTotals {
    this.fold();
    const t = this.#totals;
    const seconds = ROUTES.map((_, route) => {
      let micros = 0;
      for (let worker = 0; worker < this.#workers; worker++) {
        const base = worker * SLICE;
        const sum = Atomics.load(this.#words, base + SUM_HIGH + route) * 2 ** 32 + Atomics.load(this.#words, base + SUM_LOW + route);
        const at = worker * R + route;
        this.#sums[at] = Math.max(this.#sums[at]!, sum);
        micros += this.#sums[at]!;
      }
      return micros / 1e6;
    });
    return {
      requests: ROUTES.map((_, route) => STATUSES.map((_, s) => t[REQUESTS + route * S + s]!)),
      buckets: ROUTES.map((_, route) => Array.from({ length: B }, (_, b) => t[BUCKETS + route * B + b]!)),
      seconds,
      limited: LIMITS.map((_, l) => t[LIMITED + l]!),
    };
  }
}
