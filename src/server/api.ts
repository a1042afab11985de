/**
 * The HTTP API of one worker thread: its routes, and for the keyed ones the
 * order of checks of the contract (docs/API.md "Order of checks"): authentication (401, 403),
 * then the key's limits (429), then the body (413, 415, 400). State shared
 * between workers (the snapshot mapping, the limit counters, the account
 * store) is passed in; the request's life is the exchange's (src/http).
 *
 * Every answer is counted in the worker's shared metrics (metrics.ts: no
 * allocation) and, with an access log, logged.
 */
import type { HttpRequest, HttpResponse, TemplatedApp } from 'uWebSockets.js';
import { ERROR_CODES, errorBody, inputAsText, IprError, type ApiErrorCode } from '../errors.js';
import { Exchange, JSON_TYPE, parseJsonObject, type BodyReader, type ExchangeScope } from '../http/exchange.js';
import { Router } from '../http/router.js';
import type { Clock } from '../clock.js';
import type { AccessLog } from '../log.js';
import type { Plan } from '../plans.js';
import type { Snapshot } from '../snapshot.js';
import { keyDigest, type AccountStore } from '../store/accounts.js';
import { allowedFrom, compileAllowed } from '../store/allowed.js';
import type { KeyLimits, Limits, Verdict } from './limits.js';
import { elapsedMicros, Limit, nowMicros, Route, ROUTES, type WorkerMetrics } from './metrics.js';

/** docs/API.md "Request size": a /v1/check body over 8 KiB is refused. */
export const MAX_CHECK_BODY = 8 * 1024;
/** A batch of 1,000 full-length IPv6 addresses fits. */
export const MAX_BATCH_BODY = 64 * 1024;
export const MAX_BATCH = 1000;
/**
 * How long a request waits for the node's first lease of a key (or the next
 * one) from the shared store before 503: one round trip to Redis when it
 * answers, the command time limit when it does not.
 */
const LEASE_WAIT_MS = 1000;

export interface ApiContext extends ExchangeScope {
  snapshot: Snapshot;
  store: AccountStore;
  /** Per client address without a valid key: always this node's own counters. */
  limits: Limits;
  /** Per key: this node's counters (limits), or the leases it holds of a shared store's (leases.ts). */
  keyLimits: KeyLimits;
  plans: Map<string, Plan>;
  clock: Clock;
  /** The OpenAPI document, as served. */
  openapi: string;
  /** Requests per second allowed to a client address without a valid key. */
  unkeyedPerSecond: number;
  /** This worker's request counters. */
  metrics: WorkerMetrics;
  /** One line per answered request, when set (README "Access log"). */
  accessLog: AccessLog | null;
  /** This worker's number: request ids are `<worker>-<sequence>`. */
  worker: number;
  onError(error: unknown, route: string, requestId: string): void;
}

/** What a key may do, cached by its Authorization header until the store's version changes. */
interface KeyGrant {
  id: number;
  /** The key's slot of the limit table. */
  slot: number;
  /** The key's first characters, as the dashboard shows them: all a log may say of a key. */
  prefix: string;
  revoked: boolean;
  suspended: boolean;
  plan: Plan | undefined;
  /** Compiled by store/allowed.ts; null: from anywhere. */
  allowed: Uint8Array | null;
}

/**
 * An API request: counted and logged when answered; its answers carry the
 * rate-limit headers once a limit applied. It reads its own body into its
 * route's handler (one object per request, no closures but uWS's own).
 */
class ApiExchange extends Exchange implements BodyReader {
  readonly #api: Api;
  /** A Route value. */
  readonly route: number;
  /** nowMicros() when the request reached the handler. */
  readonly started = nowMicros();
  /** This worker's request sequence number. */
  readonly id: number;
  /** The prefix of the request's valid key, once authenticated. */
  key: string | null = null;
  /** The window of the limit that applied (X-RateLimit-*); `limit` -1 until one did. */
  limit = -1;
  remaining = 0;
  reset = 0;
  /** A keyed route's handler and the key's grant, for the body. */
  handler: KeyedHandler | null = null;
  grant: KeyGrant | null = null;
  /** `?explain=1`: the answer adds the evidence behind its flags (docs/API.md "Evidence"). */
  explain = false;
  /** The key's limits could not decide before the node holds a lease (leases.ts): decided before the body is used. */
  pending = false;

  constructor(api: Api, res: HttpResponse, req: HttpRequest, route: number, head: boolean) {
    // The API answers from a route's top or its body callback only: corked by uWS.
    super(res, req, api.ctx, head, true);
    this.#api = api;
    this.route = route;
    this.id = api.nextId();
  }

  /** Takes the rate-limit headers of a verdict (the verdict object is reused by the next admission). */
  window(v: Verdict): void {
    this.limit = v.limit;
    this.remaining = v.remaining;
    this.reset = v.reset;
  }

  protected override answered(status: number): void {
    const ctx = this.#api.ctx;
    const micros = elapsedMicros(this.started);
    ctx.metrics.request(this.route, status, micros);
    if (ctx.accessLog !== null) {
      ctx.accessLog.request(`${ctx.worker}-${this.id}`, ROUTES[this.route]!, status, micros, this.key, status === 0 ? null : this.clientText());
    }
  }

  protected override writeHeaders(res: HttpResponse): void {
    if (this.limit < 0) {
      res.writeHeader('Content-Type', JSON_TYPE);
      return;
    }
    // Four header lines in one write: each writeHeader is a crossing into
    // uWS, which writes "name: value" and a line end without looking at them.
    res.writeHeader(
      'Content-Type',
      `${JSON_TYPE}\r\nX-RateLimit-Limit: ${this.limit}\r\nX-RateLimit-Remaining: ${this.remaining}\r\nX-RateLimit-Reset: ${this.reset}`,
    );
  }

  onBody(bytes: Uint8Array): void {
    if (this.pending) {
      // uWS lends the body's bytes for this callback only.
      const kept = bytes.slice();
      return this.afterLease(1, () => this.onBody(kept));
    }
    try {
      this.handler!(this, bytes, this.grant!);
    } catch (error) {
      if (error instanceof IprError && error.code === 'invalid_json') this.sendError('invalid_json', error.details);
      else this.fail(error);
    }
  }

  onBodyRefused(code: 'payload_too_large' | 'unsupported_media_type', details: Record<string, unknown>): void {
    // The order of checks holds: a 429 first, should the key's limits refuse.
    if (this.pending) return this.afterLease(1, () => this.onBodyRefused(code, details));
    this.sendError(code, details);
  }

  /**
   * Waits until the node holds a lease for `n` more requests of the key,
   * then runs `then`; answers the refusal instead when the limits refuse,
   * and 503 when no lease came within LEASE_WAIT_MS. Answers are then
   * written outside uWS's callbacks (corked by send).
   */
  afterLease(n: number, then: () => void): void {
    this.pending = false;
    this.leaveCallbacks();
    const limits = this.#api.ctx.keyLimits;
    const grant = this.grant!;
    const until = Date.now() + LEASE_WAIT_MS;
    const attempt = async (): Promise<void> => {
      await limits.whenChanged(grant.slot, Math.max(1, until - Date.now()));
      if (!this.open) return;
      const v = limits.admitKey(grant.slot, grant.id, grant.plan!, this.#api.ctx.clock.now(), n);
      if (v.admitted) {
        this.window(v);
        return then();
      }
      if (v.refusedBy === 'pending' && Date.now() < until) return attempt();
      this.sendRefused(v);
    };
    attempt().catch((error: unknown) => this.fail(error));
  }

  /** The answer to a key whose limits refused: 429, or 401 for a key the shared store revoked, or 503. */
  sendRefused(v: Verdict): void {
    if (v.refusedBy === 'revoked') return this.sendError('unauthorized');
    if (v.refusedBy === 'pending' || v.refusedBy === 'unavailable') {
      return this.send(503, errorBody('unavailable'), [['Retry-After', String(v.retryAfter || 1)]]);
    }
    this.sendLimited(v, false);
  }

  sendError(code: ApiErrorCode, details?: Record<string, unknown>): void {
    this.send(ERROR_CODES[code].status, errorBody(code, details));
  }

  /** 429 for a verdict that refused. */
  sendLimited(v: Verdict, byAddress: boolean): void {
    this.#api.ctx.metrics.limited(byAddress ? Limit.Address : v.refusedBy === 'day' ? Limit.Day : Limit.Second);
    this.window(v);
    const message = v.refusedBy === 'day' ? ERROR_CODES.rate_limit_exceeded.message : ERROR_CODES.rate_limit_exceeded.perSecondMessage;
    const body = JSON.stringify({ error: 'rate_limit_exceeded', message, details: {}, retry_after: v.retryAfter });
    this.send(429, body, [['Retry-After', String(v.retryAfter)]]);
  }

  /** A failure nobody planned: logged with the request id, answered 500. */
  fail(error: unknown): void {
    this.#api.ctx.onError(error, ROUTES[this.route]!, `${this.#api.ctx.worker}-${this.id}`);
    this.sendError('internal_error');
  }
}

/** The keyed routes' body handlers: the body's bytes, the key's grant. */
type KeyedHandler = (ex: ApiExchange, body: Uint8Array, grant: KeyGrant) => void;

class Api {
  readonly ctx: ApiContext;
  // Grants by the Authorization header text that presented the key: a known
  // key costs one map lookup, no parsing or hashing. Only valid keys in the
  // canonical "Bearer <key>" form are cached, so the table stays as small as
  // the store; all of it is dropped whenever the store's version moves.
  readonly #grants = new Map<string, KeyGrant>();
  #grantsVersion = -1;
  #sequence = 0;

  constructor(ctx: ApiContext) {
    this.ctx = ctx;
  }

  /** The next request id: a small integer, so keeping it allocates nothing. */
  nextId(): number {
    this.#sequence = (this.#sequence + 1) % 0x40000000;
    return this.#sequence;
  }

  #grantFor(header: string): KeyGrant | null {
    const version = this.ctx.store.changeCount();
    if (version !== this.#grantsVersion) {
      this.#grants.clear();
      this.#grantsVersion = version;
      this.ctx.store.readFresh();
    }
    let grant = this.#grants.get(header);
    if (grant === undefined) {
      // "Bearer <key>": the scheme is case-insensitive (RFC 9110), the key is URL-safe text.
      const match = /^bearer +([A-Za-z0-9_-]{16,256})$/i.exec(header);
      if (match === null) return null;
      const record = this.ctx.store.keyByDigest(keyDigest(match[1]!));
      if (record === undefined) return null;
      const account = this.ctx.store.account(record.account);
      grant = {
        id: record.id,
        slot: record.slot,
        prefix: record.prefix,
        revoked: record.revoked !== null,
        suspended: account?.status !== 'active',
        plan: account ? this.ctx.plans.get(account.plan) : undefined,
        allowed: record.allowed.length === 0 ? null : compileAllowed(record.allowed),
      };
      if (header.length === 7 + match[1]!.length && header.startsWith('Bearer ')) this.#grants.set(header, grant);
    }
    return grant;
  }

  /** The key's grant, or the status that refuses it; the client address is read only when a key's allowed list needs it. */
  #authenticate(header: string, ex: ApiExchange): KeyGrant | 401 | 403 | 503 {
    const grant = this.#grantFor(header);
    if (grant === null || grant.revoked) return 401;
    if (grant.suspended || grant.plan === undefined) return 403;
    if (grant.allowed !== null && !allowedFrom(grant.allowed, ex.clientBytes().buffer as ArrayBuffer)) return 403;
    // Only when another server on the data folder was started with a larger --max-keys: never a 500.
    if (grant.slot >= this.ctx.keyLimits.maxKeys) return 503;
    return grant;
  }

  /**
   * A route that needs a key: authentication (401, 403, 503; refusals are limited
   * per client address), then one request against the key's limits (429),
   * then the body (413, 415), then `handler`. Anything thrown answers 500, an
   * IprError of an API code its own status.
   */
  keyed(route: number, maxBody: number, handler: KeyedHandler) {
    return (res: HttpResponse, req: HttpRequest): void => {
      const ex = new ApiExchange(this, res, req, route, false);
      try {
        const authorization = req.getHeader('authorization');
        const body = { contentType: req.getHeader('content-type'), contentLength: req.getHeader('content-length') };
        const query = req.getQuery();
        ex.explain = query !== '' && new URLSearchParams(query).get('explain') === '1';
        const now = this.ctx.clock.now();
        const grant = this.#authenticate(authorization, ex);
        if (typeof grant === 'number') {
          const v = this.ctx.limits.admitAddress(ex.clientBytes(), this.ctx.unkeyedPerSecond, now);
          if (!v.admitted) return ex.sendLimited(v, true);
          ex.window(v);
          return ex.sendError(grant === 401 ? 'unauthorized' : grant === 403 ? 'forbidden' : 'unavailable');
        }
        ex.key = grant.prefix;
        const v = this.ctx.keyLimits.admitKey(grant.slot, grant.id, grant.plan!, now);
        if (v.admitted) ex.window(v);
        else if (v.refusedBy === 'pending') ex.pending = true;
        else return ex.sendRefused(v);
        ex.handler = handler;
        ex.grant = grant;
        ex.readBody(body, maxBody, ex);
      } catch (error) {
        ex.fail(error);
      }
    };
  }

  /**
   * POST /v1/check: one address. The usual body is answered in the one
   * native call; any other is read here, as is every explained one.
   */
  check: KeyedHandler = (ex, bytes) => {
    const answer = ex.explain ? null : this.ctx.snapshot.lookupBodyBytes(bytes);
    if (answer !== null) return ex.send(200, answer);
    const body = parseJsonObject(bytes);
    const ip = body.ip;
    if (ip === undefined || ip === null) return ex.sendError('missing_ip');
    const result = ex.explain ? this.ctx.snapshot.explainJson(ip) : this.ctx.snapshot.lookupJsonBytes(ip);
    if (result === null) return ex.sendError('invalid_ip', { ip: inputAsText(ip) });
    ex.send(200, result);
  };

  /** POST /v1/check/batch: up to MAX_BATCH addresses, each counted as one request. */
  batch: KeyedHandler = (ex, bytes, grant) => {
    const ips = parseJsonObject(bytes).ips;
    if (!Array.isArray(ips) || ips.length === 0 || ips.length > MAX_BATCH) return ex.sendError('invalid_batch', { max: MAX_BATCH });
    // One request was counted already; the batch counts one per address.
    const answer = () => ex.send(200, this.ctx.snapshot.lookupBatchJsonBytes(ips));
    if (ips.length > 1) {
      const v = this.ctx.keyLimits.admitKey(grant.slot, grant.id, grant.plan!, this.ctx.clock.now(), ips.length - 1);
      if (!v.admitted) return v.refusedBy === 'pending' ? ex.afterLease(ips.length - 1, answer) : ex.sendRefused(v);
      ex.window(v);
    }
    answer();
  };

  /** GET /v1/health: 200 while serving, 503 while draining. */
  health = (res: HttpResponse, req: HttpRequest): void => {
    const ex = new ApiExchange(this, res, req, Route.Health, req.getMethod() === 'head');
    const healthy = !this.ctx.draining();
    ex.send(healthy ? 200 : 503, healthy ? '{"status":"healthy"}' : '{"status":"unavailable"}');
  };

  /** GET /v1/openapi.json. */
  openapi = (res: HttpResponse, req: HttpRequest): void => {
    new ApiExchange(this, res, req, Route.OpenApi, req.getMethod() === 'head').send(200, this.ctx.openapi);
  };

  /** 405, with the methods the path has. */
  methodNotAllowed = (res: HttpResponse, req: HttpRequest, allowed: string[], pattern: string): void => {
    const ex = new ApiExchange(this, res, req, ROUTES.indexOf(pattern as (typeof ROUTES)[number]), req.getMethod() === 'head');
    ex.send(405, errorBody('method_not_allowed', { allowed }), [['Allow', allowed.join(', ')]]);
  };

  /** Any other path: 404. */
  notFound = (res: HttpResponse, req: HttpRequest): void => {
    new ApiExchange(this, res, req, Route.Other, req.getMethod() === 'head').sendError('not_found');
  };
}

/** Mounts the API's routes (/v1, and the 404 of every path nothing else answers) on a worker's app. */
export function mountApi(app: TemplatedApp, ctx: ApiContext): void {
  const api = new Api(ctx);
  new Router(app)
    .add('post', ROUTES[Route.Check], api.keyed(Route.Check, MAX_CHECK_BODY, api.check))
    .add('post', ROUTES[Route.Batch], api.keyed(Route.Batch, MAX_BATCH_BODY, api.batch))
    .add('get', ROUTES[Route.Health], api.health)
    .add('get', ROUTES[Route.OpenApi], api.openapi)
    .refuseOtherMethods(api.methodNotAllowed);
  app.any('/*', api.notFound);
}
