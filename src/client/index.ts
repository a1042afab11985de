/**
 * A typed client of the ip-reputation HTTP API: `ip-reputation/client`.
 *
 * No dependencies: it uses the global `fetch` (Node.js 18 and later,
 * browsers, Deno, Bun) and nothing else of this package, so it loads
 * without the native addon. The body types are generated from the OpenAPI
 * document (types.ts).
 *
 * Retries: a 429 is retried after its Retry-After (when that is at most
 * MAX_RETRY_AFTER seconds: a spent daily limit is thrown at once, with
 * `retryAfter` set); a 503, a network error or a timeout after an
 * exponential backoff (about 250 ms, 500 ms, 1 s... up to 4 s, with
 * jitter). At most `maxRetries` retries per request; any other answer,
 * every other 4xx included, is never retried. A batch too large for the
 * key's per-second limit is halved instead (checkBatch).
 */
import type { BatchResponse, CheckResult, ErrorBody } from './types.js';

export type * from './types.js';

/** A code of the API's error body, or what the client says when there is no usable answer. */
export type IprErrorCode = ErrorBody['error'] | 'network_error' | 'timeout' | 'invalid_response';

export interface IprClientOptions {
  /** Where the server is: `https://ipr.example.com` (the API is under `/v1`; a base that ends in `/v1` is taken as it is). */
  baseUrl: string;
  /** An API key (`ipr_...`), from the dashboard or `ipr keys create`. Keep it server-side. */
  apiKey: string;
  /** How long one attempt may take, answer included, in milliseconds (default 10,000). */
  timeoutMs?: number;
  /** Retries after the first attempt of a request (default 2). */
  maxRetries?: number;
}

/** Entries a batch request holds at most, and the most bytes its body may have (the server's limits). */
export const BATCH_SIZE = 1000;
export const BATCH_BODY_BYTES = 64 * 1024;
/** The longest Retry-After, in seconds, that a 429 is waited out and retried. */
export const MAX_RETRY_AFTER = 60;

/** An answer that is not a success, or no answer at all. */
export class IprApiError extends Error {
  /** The HTTP status; 0 when no answer came (network error, timeout). */
  readonly status: number;
  readonly code: IprErrorCode;
  /** The error body's details (`{}` when none). */
  readonly details: Record<string, unknown>;
  /** Seconds to wait before asking again (from Retry-After on a 429 or 503), else null. */
  readonly retryAfter: number | null;

  constructor(status: number, code: IprErrorCode, message: string, details: Record<string, unknown> = {}, retryAfter: number | null = null) {
    super(message);
    this.name = 'IprApiError';
    this.status = status;
    this.code = code;
    this.details = details;
    this.retryAfter = retryAfter;
  }
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** The backoff before retry `attempt` (0 for the first): 250 ms doubling, at most 4 s, between half and all of it. */
function backoff(attempt: number): number {
  const full = Math.min(4000, 250 * 2 ** attempt);
  return full / 2 + (Math.random() * full) / 2;
}

function isErrorBody(value: unknown): value is ErrorBody {
  const body = value as ErrorBody | null;
  return typeof body === 'object' && body !== null && typeof body.error === 'string' && typeof body.message === 'string';
}

/** Seconds of a Retry-After header (the API sends whole seconds), else of the body's retry_after. */
function retryAfterOf(response: Response, body: unknown): number | null {
  const header = Number(response.headers.get('retry-after'));
  if (Number.isFinite(header) && header >= 0 && response.headers.get('retry-after') !== null) return header;
  const field = (body as { retry_after?: unknown } | null)?.retry_after;
  return typeof field === 'number' && field >= 0 ? field : null;
}

/**
 * The next chunk of `ips` from `from` for the batch endpoint: at most `size`
 * entries, and a body within BATCH_BODY_BYTES (only long invalid entries make
 * that the tighter bound).
 */
function nextChunk(ips: readonly unknown[], from: number, size: number): unknown[] {
  const utf8 = new TextEncoder();
  let bytes = '{"ips":[]}'.length;
  let to = from;
  while (to < ips.length && to - from < size) {
    bytes += utf8.encode(JSON.stringify(ips[to]) ?? 'null').length + 1;
    if (to > from && bytes > BATCH_BODY_BYTES) break;
    to++;
  }
  return ips.slice(from, to);
}

export class IprClient {
  readonly #base: string;
  readonly #apiKey: string;
  readonly #timeoutMs: number;
  readonly #maxRetries: number;
  /** Entries per batch: BATCH_SIZE, until the key's per-second limit proved smaller. */
  #batchSize = BATCH_SIZE;

  constructor(options: IprClientOptions) {
    if (typeof options?.baseUrl !== 'string' || !/^https?:\/\//.test(options.baseUrl)) throw new TypeError('IprClient: baseUrl must be an http(s) URL');
    if (typeof options.apiKey !== 'string' || options.apiKey === '') throw new TypeError('IprClient: apiKey is required');
    const timeoutMs = options.timeoutMs ?? 10_000;
    const maxRetries = options.maxRetries ?? 2;
    if (!(Number.isFinite(timeoutMs) && timeoutMs > 0)) throw new TypeError('IprClient: timeoutMs must be a positive number');
    if (!(Number.isInteger(maxRetries) && maxRetries >= 0)) throw new TypeError('IprClient: maxRetries must be a whole number from 0');
    const base = options.baseUrl.replace(/\/+$/, '');
    this.#base = base.endsWith('/v1') ? base : `${base}/v1`;
    this.#apiKey = options.apiKey;
    this.#timeoutMs = timeoutMs;
    this.#maxRetries = maxRetries;
  }

  /** The check result of one address; throws IprApiError (`invalid_ip` for a text that is not an address). */
  check(ip: string): Promise<CheckResult> {
    return this.#post<CheckResult>('/check', { ip });
  }

  /**
   * The check results of any number of addresses, in their order: a check
   * result, or the `invalid_ip` error body of an entry that is not an
   * address. Sent in batches of up to 1,000, one after another. Each address
   * counts as one request against the key's limits, the per-second one too:
   * a batch refused by it twice in a row (after waiting out its Retry-After)
   * is larger than the plan allows in a second, so it is halved, and this
   * client keeps the smaller size. Throws IprApiError when a batch fails
   * after its retries.
   */
  async checkBatch(ips: readonly unknown[]): Promise<(CheckResult | ErrorBody)[]> {
    if (!Array.isArray(ips)) throw new TypeError('IprClient.checkBatch takes an array of addresses');
    const results: (CheckResult | ErrorBody)[] = [];
    let refusals = 0;
    while (results.length < ips.length) {
      const chunk = nextChunk(ips, results.length, this.#batchSize);
      let answer: BatchResponse;
      try {
        answer = await this.#post<BatchResponse>('/check/batch', { ips: chunk }, false);
      } catch (error) {
        const limited = error instanceof IprApiError && error.status === 429 && error.retryAfter !== null && error.retryAfter <= MAX_RETRY_AFTER;
        if (!limited) throw error;
        if (refusals > 0 && chunk.length > 1) {
          this.#batchSize = Math.ceil(chunk.length / 2);
          refusals = 0;
        } else if (++refusals > this.#maxRetries) {
          throw error;
        }
        await sleep(error.retryAfter! * 1000);
        continue;
      }
      if (!Array.isArray(answer?.results) || answer.results.length !== chunk.length) {
        throw new IprApiError(200, 'invalid_response', `the server answered ${answer?.results?.length ?? 'no'} results for ${chunk.length} addresses`);
      }
      results.push(...answer.results);
      refusals = 0;
    }
    return results;
  }

  /** POSTs `body`, retrying as the module says (429s only when `retryLimited`); returns the parsed answer. */
  async #post<T>(path: string, body: unknown, retryLimited = true): Promise<T> {
    const text = JSON.stringify(body);
    for (let attempt = 0; ; attempt++) {
      const retriesLeft = attempt < this.#maxRetries;
      let response: Response;
      let answer: string;
      try {
        response = await fetch(`${this.#base}${path}`, {
          method: 'POST',
          headers: { authorization: `Bearer ${this.#apiKey}`, 'content-type': 'application/json', accept: 'application/json' },
          body: text,
          signal: AbortSignal.timeout(this.#timeoutMs),
        });
        answer = await response.text();
      } catch (error) {
        const timedOut = (error as Error).name === 'TimeoutError';
        if (retriesLeft) {
          await sleep(backoff(attempt));
          continue;
        }
        const cause = (error as { cause?: { code?: string; message?: string } }).cause;
        throw timedOut
          ? new IprApiError(0, 'timeout', `no answer from ${this.#base}${path} within ${this.#timeoutMs} ms (${attempt + 1} attempts)`)
          : new IprApiError(0, 'network_error', `${this.#base}${path}: ${cause?.code ?? cause?.message ?? (error as Error).message} (${attempt + 1} attempts)`);
      }
      let parsed: unknown;
      try {
        parsed = JSON.parse(answer);
      } catch {
        parsed = undefined;
      }
      if (response.ok) {
        if (parsed === undefined) throw new IprApiError(response.status, 'invalid_response', `${this.#base}${path} answered ${response.status} without JSON`);
        return parsed as T;
      }
      const retryAfter = retryAfterOf(response, parsed);
      if (retryLimited && retriesLeft && response.status === 429 && retryAfter !== null && retryAfter <= MAX_RETRY_AFTER) {
        await sleep(retryAfter * 1000);
        continue;
      }
      if (retriesLeft && response.status === 503) {
        await sleep(Math.max(backoff(attempt), (retryAfter ?? 0) * 1000));
        continue;
      }
      if (isErrorBody(parsed)) {
        throw new IprApiError(response.status, parsed.error, parsed.message, (parsed.details as Record<string, unknown>) ?? {}, retryAfter);
      }
      throw new IprApiError(response.status, response.status === 503 ? 'unavailable' : 'invalid_response', `${this.#base}${path} answered ${response.status} ${response.statusText}`, {}, retryAfter);
    }
  }
}
