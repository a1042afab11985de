/**
 * The HTTP API of one worker thread, on uWebSockets.js: routes, the order of
 * checks of decisions.md, and the exact status, headers and body of every
 * answer. State shared between workers (the snapshot mapping, the limit
 * counters, the account store) is passed in.
 *
 * uWebSockets.js rules followed here: everything needed from the request is
 * read in the synchronous top of a handler (the request object dies after
 * it); onAborted is registered before waiting for the body; body chunks are
 * used or copied inside their callback; writes after the top are corked.
 *
 * Every answer goes through send(), which counts it in the worker's shared
 * metrics (metrics.ts: no allocation) and, with an access log, logs it.
 */
import ipaddr from 'ipaddr.js';
import type { HttpRequest, HttpResponse, TemplatedApp } from 'uWebSockets.js';
import { ERROR_CODES, errorBody, inputAsText, type ApiErrorCode } from '../errors.js';
import type { Snapshot } from '../snapshot.js';
import { keyDigest, type AccountStore } from '../store/accounts.js';
import { allowedFrom, compileAllowed } from '../store/allowed.js';
import type { Clock } from '../clock.js';
import type { Limits, Verdict } from './limits.js';
import type { AccessLog } from '../log.js';
import { elapsedMicros, Limit, nowMicros, Route, ROUTES, type WorkerMetrics } from './metrics.js';
import type { Plan } from '../plans.js';

/** decisions.md: a /v1/check body over 8 KiB is refused. */
export const MAX_CHECK_BODY = 8 * 1024;
/** A batch of 1,000 full-length IPv6 addresses fits. */
export const MAX_BATCH_BODY = 64 * 1024;
export const MAX_BATCH = 1000;

export interface ApiContext {
  snapshot: Snapshot;
  store: AccountStore;
  limits: Limits;
  plans: Map<string, Plan>;
  clock: Clock;
  /** The OpenAPI document, as served. */
  openapi: string;
  /** Requests per second allowed to a client address without a valid key. */
  unkeyedPerSecond: number;
  /** True once the server is shutting down: health answers 503, connections close after their answer. */
  draining(): boolean;
  /** Requests being answered, for a graceful shutdown. */
  inflight: { count: number };
  /** This worker's request counters. */
  metrics: WorkerMetrics;
  /** One line per answered request, when set (README "Access log"). */
  accessLog: AccessLog | null;
  /** This worker's number: request ids are `<worker>-<sequence>`. */
  worker: number;
  onError(error: unknown, route: string, requestId: string): void;
}

const STATUS: Record<number, string> = {
  200: '200 OK',
  400: '400 Bad Request',
  401: '401 Unauthorized',
  403: '403 Forbidden',
  404: '404 Not Found',
  405: '405 Method Not Allowed',
  413: '413 Payload Too Large',
  415: '415 Unsupported Media Type',
  429: '429 Too Many Requests',
  500: '500 Internal Server Error',
  503: '503 Service Unavailable',
};
const JSON_TYPE = 'application/json; charset=utf-8';
const PER_SECOND_MESSAGE = 'Per-second request limit exceeded';

/**
 * Ends the answer to a HEAD request (inside a cork): the headers GET would
 * get, with the Content-Length of its content, and no content, which would
 * be read as the next answer (RFC 9110). uWS 20.30's endWithoutBody ends a
 * response only when called without arguments (given a length, it leaves
 * the response open and uWS aborts the process), so the length is written
 * as a header; a closing answer says Content-Length: 0 instead.
 */
export function endHead(res: HttpResponse, length: number, close: boolean): void {
  if (close) {
    res.end('', true);
    return;
  }
  res.writeHeader('Content-Length', String(length));
  res.endWithoutBody();
}

/** A cached answer to "what may this key do", valid until the store's version changes. */
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

type Auth = { grant: KeyGrant; status: 200 } | { grant: null; status: 401 | 403 | 503 };

/** The rate-limit headers of a verdict, copied out (the verdict object is reused). */
type Window = [limit: number, remaining: number, reset: number];

const utf8 = new TextDecoder('utf-8', { fatal: true });

function isJsonContentType(value: string): boolean {
  const semicolon = value.indexOf(';');
  return (semicolon < 0 ? value : value.slice(0, semicolon)).trim().toLowerCase() === 'application/json';
}

/** The client address as 16 bytes, IPv4 as IPv4-mapped. */
export function clientBytes(raw: ArrayBuffer): Uint8Array {
  const bytes = new Uint8Array(16);
  const from = new Uint8Array(raw);
  if (from.length === 4) {
    bytes[10] = 0xff;
    bytes[11] = 0xff;
    bytes.set(from, 12);
  } else {
    bytes.set(from.subarray(0, 16));
  }
  return bytes;
}

export function clientAddress(bytes: Uint8Array): ipaddr.IPv4 | ipaddr.IPv6 {
  const v6 = ipaddr.fromByteArray([...bytes]) as ipaddr.IPv6;
  return v6.isIPv4MappedAddress() ? v6.toIPv4Address() : v6;
}

export function createApi(app: TemplatedApp, ctx: ApiContext): TemplatedApp {
  // Grants by the Authorization header text that presented the key: a known
  // key costs one map lookup, no parsing or hashing. Only valid keys in the
  // canonical "Bearer <key>" form are cached, so the table stays as small as
  // the store; all of it is dropped whenever the store's version moves.
  const grants = new Map<string, KeyGrant>();
  let grantsVersion = -1;

  function grantFor(header: string): KeyGrant | null {
    const version = ctx.store.version();
    if (version !== grantsVersion) {
      grants.clear();
      grantsVersion = version;
    }
    let grant = grants.get(header);
    if (grant === undefined) {
      // "Bearer <key>": the scheme is case-insensitive (RFC 9110), the key is URL-safe text.
      const match = /^bearer +([A-Za-z0-9_-]{16,256})$/i.exec(header);
      if (match === null) return null;
      const record = ctx.store.keyByDigest(keyDigest(match[1]!));
      if (record === undefined) return null;
      const account = ctx.store.account(record.account);
      grant = {
        id: record.id,
        slot: record.slot,
        prefix: record.prefix,
        revoked: record.revoked !== null,
        suspended: account?.status !== 'active',
        plan: account ? ctx.plans.get(account.plan) : undefined,
        allowed: record.allowed.length === 0 ? null : compileAllowed(record.allowed),
      };
      if (header.length === 7 + match[1]!.length && header.startsWith('Bearer ')) grants.set(header, grant);
    }
    return grant;
  }

  /** Who may do what; the client address is read only when a key's allowed list needs it. */
  function authenticate(header: string, res: HttpResponse): Auth {
    const grant = grantFor(header);
    if (grant === null || grant.revoked) return { grant: null, status: 401 };
    if (grant.suspended || grant.plan === undefined) return { grant: null, status: 403 };
    if (grant.allowed !== null && !allowedFrom(grant.allowed, res.getRemoteAddress())) return { grant: null, status: 403 };
    // Only when another server on the data folder was started with a larger --max-keys: never a 500.
    if (grant.slot >= ctx.limits.maxKeys) return { grant: null, status: 503 };
    return { grant, status: 200 };
  }

  function window(v: Verdict): Window {
    return [v.limit, v.remaining, v.reset];
  }

  function send(
    res: HttpResponse,
    state: RequestState,
    status: number,
    /** Copied before send returns (uWS copies what end() is given). */
    body: string | Uint8Array,
    limits: Window | null,
    extra?: [string, string][],
  ): void {
    if (state.done) return;
    state.done = true;
    ctx.inflight.count--;
    if (state.aborted) return;
    const close = ctx.draining();
    answered(state, status, ctx.accessLog === null ? null : res);
    res.cork(() => {
      res.writeStatus(STATUS[status]!);
      res.writeHeader('Content-Type', JSON_TYPE);
      if (limits !== null) {
        res.writeHeader('X-RateLimit-Limit', String(limits[0]));
        res.writeHeader('X-RateLimit-Remaining', String(limits[1]));
        res.writeHeader('X-RateLimit-Reset', String(limits[2]));
      }
      if (extra) for (const [name, value] of extra) res.writeHeader(name, value);
      if (state.head) endHead(res, typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength, close);
      else res.end(body, close);
    });
  }

  function sendError(
    res: HttpResponse,
    state: RequestState,
    code: ApiErrorCode,
    limits: Window | null,
    details?: Record<string, unknown>,
  ): void {
    send(res, state, ERROR_CODES[code].status, errorBody(code, details), limits);
  }

  /** Counts (and logs) an answer; status 0: the client went away first. `res` only when logging, before it ends. */
  function answered(state: RequestState, status: number, res: HttpResponse | null): void {
    const micros = elapsedMicros(state.started);
    ctx.metrics.request(state.route, status, micros);
    if (ctx.accessLog !== null) {
      const client = res === null ? null : Buffer.from(res.getRemoteAddressAsText()).toString('latin1');
      ctx.accessLog.request(`${ctx.worker}-${state.id}`, ROUTES[state.route]!, status, micros, state.key, client);
    }
  }

  function sendLimited(res: HttpResponse, state: RequestState, v: Verdict, byAddress: boolean): void {
    ctx.metrics.limited(byAddress ? Limit.Address : v.refusedBy === 'day' ? Limit.Day : Limit.Second);
    const message = v.refusedBy === 'day' ? ERROR_CODES.rate_limit_exceeded.message : PER_SECOND_MESSAGE;
    const body = JSON.stringify({ error: 'rate_limit_exceeded', message, details: {}, retry_after: v.retryAfter });
    send(res, state, 429, body, window(v), [['Retry-After', String(v.retryAfter)]]);
  }

  interface RequestState {
    aborted: boolean;
    done: boolean;
    /** A Route value. */
    route: number;
    /** nowMicros() when the request reached the handler. */
    started: number;
    /** This worker's request sequence number. */
    id: number;
    /** The prefix of the request's valid key, once authenticated. */
    key: string | null;
    /** A HEAD request: answered as GET would be, without content. */
    head: boolean;
  }

  let sequence = 0;

  /** The state of a request just arrived, counted in flight. */
  function begin(route: number, head = false): RequestState {
    ctx.inflight.count++;
    sequence = (sequence + 1) % 0x40000000; // a small integer: no allocation
    return { aborted: false, done: false, route, started: nowMicros(), id: sequence, key: null, head };
  }

  /**
   * The shared first part of /check and /check/batch: authentication (401,
   * 403, with the per-address limit), then one request against the key's
   * limits (429), then the body (413, 415). Calls `withBody` with the body
   * text and the key's grant and window; any throw answers 500.
   */
  function keyed(route: number, maxBody: number, withBody: (res: HttpResponse, state: RequestState, text: string, grant: KeyGrant, limits: Window) => void) {
    const routeName = ROUTES[route]!;
    return (res: HttpResponse, req: HttpRequest): void => {
      const state = begin(route);
      res.onAborted(() => {
        state.aborted = true;
        if (!state.done) {
          state.done = true;
          ctx.inflight.count--;
          answered(state, 0, null);
        }
      });
      try {
        const authorization = req.getHeader('authorization');
        const contentType = req.getHeader('content-type');
        const declaredLength = req.getHeader('content-length');
        const now = ctx.clock.now();

        const auth = authenticate(authorization, res);
        if (auth.grant === null) {
          const v = ctx.limits.admitAddress(clientBytes(res.getRemoteAddress()), ctx.unkeyedPerSecond, now);
          if (!v.admitted) sendLimited(res, state, v, true);
          else sendError(res, state, auth.status === 401 ? 'unauthorized' : auth.status === 403 ? 'forbidden' : 'unavailable', window(v));
          return;
        }
        state.key = auth.grant.prefix;
        const v = ctx.limits.admitKey(auth.grant.slot, auth.grant.id, auth.grant.plan!, now);
        if (!v.admitted) {
          sendLimited(res, state, v, false);
          return;
        }
        const limits = window(v);
        const grant = auth.grant;
        if (declaredLength !== '' && Number(declaredLength) > maxBody) {
          // Not waiting for a body announced too large: uWS passes over its
          // bytes, and the connection serves the next request. (Closing it
          // here, with body bytes unread, makes the kernel reset it, and the
          // client may lose this answer.)
          sendError(res, state, 'payload_too_large', limits, { max_bytes: maxBody });
          return;
        }
        const chunks: Buffer[] = [];
        let size = 0;
        res.onData((chunk, isLast) => {
          if (state.done) return;
          try {
            size += chunk.byteLength;
            if (size > maxBody) {
              sendError(res, state, 'payload_too_large', limits, { max_bytes: maxBody }); // the rest of the body is passed over
              return;
            }
            if (!isLast) {
              chunks.push(Buffer.from(chunk.slice(0))); // the chunk dies with this callback: copy
              return;
            }
            if (!isJsonContentType(contentType)) {
              sendError(res, state, 'unsupported_media_type', limits);
              return;
            }
            const last = new Uint8Array(chunk);
            let text: string;
            try {
              text = utf8.decode(chunks.length === 0 ? last : Buffer.concat([...chunks, last]));
            } catch {
              sendError(res, state, 'invalid_json', limits, { reason: 'the body is not UTF-8' });
              return;
            }
            withBody(res, state, text, grant, limits);
          } catch (error) {
            ctx.onError(error, routeName, `${ctx.worker}-${state.id}`);
            sendError(res, state, 'internal_error', limits);
          }
        });
      } catch (error) {
        ctx.onError(error, routeName, `${ctx.worker}-${state.id}`);
        sendError(res, state, 'internal_error', null);
      }
    };
  }

  function parseObject(text: string): Record<string, unknown> | null {
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      return null;
    }
    return typeof body === 'object' && body !== null && !Array.isArray(body) ? (body as Record<string, unknown>) : null;
  }

  app.post(
    '/v1/check',
    keyed(Route.Check, MAX_CHECK_BODY, (res, state, text, _grant, limits) => {
      const body = parseObject(text);
      if (body === null) return sendError(res, state, 'invalid_json', limits);
      const ip = body.ip;
      if (ip === undefined || ip === null) return sendError(res, state, 'missing_ip', limits);
      const result = ctx.snapshot.lookupJsonBytes(ip);
      if (result === null) return sendError(res, state, 'invalid_ip', limits, { ip: inputAsText(ip) });
      send(res, state, 200, result, limits);
    }),
  );

  app.post(
    '/v1/check/batch',
    keyed(Route.Batch, MAX_BATCH_BODY, (res, state, text, grant, limits) => {
      const body = parseObject(text);
      if (body === null) return sendError(res, state, 'invalid_json', limits);
      const ips = body.ips;
      if (!Array.isArray(ips) || ips.length === 0 || ips.length > MAX_BATCH) {
        return sendError(res, state, 'invalid_batch', limits, { max: MAX_BATCH });
      }
      // One request was counted already; the batch counts one per address.
      let window_ = limits;
      if (ips.length > 1) {
        const v = ctx.limits.admitKey(grant.slot, grant.id, grant.plan!, ctx.clock.now(), ips.length - 1);
        if (!v.admitted) return sendLimited(res, state, v, false);
        window_ = window(v);
      }
      send(res, state, 200, `{"results":[${ctx.snapshot.lookupManyJson(ips).join(',')}]}`, window_);
    }),
  );

  const health = (res: HttpResponse, req: HttpRequest) => {
    const state = begin(Route.Health, req.getMethod() === 'head');
    const healthy = !ctx.draining();
    send(res, state, healthy ? 200 : 503, healthy ? '{"status":"healthy"}' : '{"status":"unavailable"}', null);
  };
  app.get('/v1/health', health);
  app.head('/v1/health', health);

  const openapi = (res: HttpResponse, req: HttpRequest) => {
    const state = begin(Route.OpenApi, req.getMethod() === 'head');
    send(res, state, 200, ctx.openapi, null);
  };
  app.get('/v1/openapi.json', openapi);
  app.head('/v1/openapi.json', openapi);

  const allow: [number, string][] = [
    [Route.Check, 'POST'],
    [Route.Batch, 'POST'],
    [Route.Health, 'GET, HEAD'],
    [Route.OpenApi, 'GET, HEAD'],
  ];
  for (const [route, methods] of allow) {
    app.any(ROUTES[route]!, (res, req) => {
      const state = begin(route, req.getMethod() === 'head');
      send(res, state, 405, errorBody('method_not_allowed', { allowed: methods.split(', ') }), null, [['Allow', methods]]);
    });
  }
  app.any('/*', (res, req) => {
    const state = begin(Route.Other, req.getMethod() === 'head');
    send(res, state, 404, errorBody('not_found'), null);
  });
  return app;
}
