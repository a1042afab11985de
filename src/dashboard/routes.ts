/**
 * The customer dashboard on the server's uWebSockets.js app: its pages
 * (static files of the top-level `dashboard/` folder) under /dashboard, its
 * JSON endpoints under /dashboard/api. Mounted by each worker thread beside
 * the API; the /v1 routes are untouched and unknown paths outside /dashboard
 * still reach the API's 404.
 *
 * Every answer carries the security headers below. Pages that need a session
 * redirect to the sign-in page without one. Changes (POST, PUT, DELETE) are
 * refused when cross-site (Sec-Fetch-Site, Origin) and, when signed in,
 * without the session's CSRF token in X-CSRF-Token. Request bodies are JSON
 * only: a cross-site HTML form cannot send one.
 *
 * uWebSockets.js rules as in http.ts: the request is read in the synchronous
 * top of a handler; onAborted is registered before any waiting; body chunks
 * are copied in their callback; writes after an await are corked.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { STATUS_CODES } from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import ipaddr from 'ipaddr.js';
import type { HttpRequest, HttpResponse, TemplatedApp } from 'uWebSockets.js';
import { ERROR_CODES, errorBody, IprError, type ErrorCode } from '../errors.js';
import type { AccountStore } from '../store/accounts.js';
import { clientAddress, clientBytes, endHead } from '../server/http.js';
import type { Logger } from '../log.js';
import { Sessions, sessionCookie, type CurrentSession } from './sessions.js';
import { accountView, createKey, keysView, keyView, sourcesView, usageView, type ViewContext } from './views.js';

export interface DashboardOptions {
  /** Anyone may make an account (`ipr serve --signup`); it gets the first plan of the plans file. */
  signup: boolean;
  /**
   * The server runs behind a reverse proxy (`ipr serve --trust-proxy`): its
   * X-Forwarded-Proto says whether the client used HTTPS (then cookies are
   * Secure), the last address of X-Forwarded-For is the client's (sign-in
   * limits), X-Forwarded-Host the host the client asked for (Origin check).
   */
  trustProxy: boolean;
  /** Sign-ups taken in 24 hours, from everyone together (`--max-signups-per-day`). */
  signupsPerDay: number;
  /** Keys made in the dashboard in 24 hours, for every account together (`--max-keys-per-day`). */
  keysPerDay: number;
}

export interface DashboardContext extends ViewContext, DashboardOptions {
  store: AccountStore;
  /** True once the server is shutting down: connections close after their answer. */
  draining(): boolean;
  /** Requests being answered, for a graceful shutdown (shared with the API). */
  inflight: { count: number };
  log: Logger;
}

const STATIC_DIR = fileURLToPath(new URL('../../dashboard/', import.meta.url));
const MAX_BODY = 8 * 1024;
const PRUNE_EVERY_MS = 15 * 60_000;

/** Sent with every dashboard answer. No inline script or style anywhere: the pages load theirs from /dashboard/assets. */
const SECURITY_HEADERS: [string, string][] = [
  [
    'Content-Security-Policy',
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
      "form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
  ],
  ['X-Frame-Options', 'DENY'],
  ['X-Content-Type-Options', 'nosniff'],
  ['Referrer-Policy', 'no-referrer'],
  ['Cross-Origin-Opener-Policy', 'same-origin'],
  ['Cross-Origin-Resource-Policy', 'same-origin'],
];
const HSTS: [string, string] = ['Strict-Transport-Security', 'max-age=31536000'];
/** The answer to every valid sign-up, whether the email had an account or not. */
const SIGNED_UP = 'If this email can have an account, it has one now: sign in with it and the password you chose.';

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.svg': 'image/svg+xml',
};

interface StaticFile {
  body: Buffer;
  type: string;
  etag: string;
}

function staticFile(body: Buffer, type: string): StaticFile {
  return { body, type, etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"` };
}

/**
 * Every file of the dashboard folder, by its path relative to it
 * ("sign-in.html", "assets/keys.js"). The signed-in pages share one frame:
 * `pages/keys.html` is served as `keys.html`, its content put in
 * `layout.html` in place of {{content}}, with its <h1> as {{title}} and its
 * name as {{page}} (which names its script).
 */
function loadStatic(): Map<string, StaticFile> {
  const files = new Map<string, StaticFile>();
  for (const entry of readdirSync(STATIC_DIR, { recursive: true, withFileTypes: true })) {
    const type = CONTENT_TYPES[path.extname(entry.name)];
    if (!entry.isFile() || type === undefined) continue;
    const full = path.join(entry.parentPath, entry.name);
    files.set(path.relative(STATIC_DIR, full).split(path.sep).join('/'), staticFile(readFileSync(full), type));
  }
  const layout = files.get('layout.html')!.body.toString('utf8');
  files.delete('layout.html');
  for (const [name, file] of [...files]) {
    const page = /^pages\/([a-z-]+)\.html$/.exec(name)?.[1];
    if (page === undefined) continue;
    files.delete(name);
    const content = file.body.toString('utf8');
    const fields: Record<string, string> = { title: /<h1>([^<]*)<\/h1>/.exec(content)?.[1] ?? page, page, content };
    const html = layout.replace(/\{\{(title|page|content)\}\}/g, (_, field: string) => fields[field]!);
    files.set(`${page}.html`, staticFile(Buffer.from(html), file.type));
  }
  return files;
}

/**
 * Pages, and whether they need a session (without one: to the sign-in page;
 * with one, the others go to the keys page). A Map: a plain object would
 * find "__proto__" and "constructor" too.
 */
const PAGES = new Map<string, boolean>([['keys', true], ['usage', true], ['account', true], ['sign-in', false], ['sign-up', false]]);

/** What a handler needs of a request, read in the synchronous top (the HttpRequest dies after it). */
interface Incoming {
  params: string[];
  sessionId: string | null;
  csrf: string;
  origin: string;
  fetchSite: string;
  host: string;
  secure: boolean;
  /** The client, as the sign-in limits name it: an IPv4 address or an IPv6 /64. */
  address: string;
  contentType: string;
  contentLength: string;
  ifNoneMatch: string;
}

/** The last value of a list header (what the nearest proxy wrote). */
function lastOf(header: string): string {
  const comma = header.lastIndexOf(',');
  return (comma < 0 ? header : header.slice(comma + 1)).trim();
}

function addressName(address: ipaddr.IPv4 | ipaddr.IPv6): string {
  if (address.kind() === 'ipv4') return address.toString();
  const v6 = address as ipaddr.IPv6;
  if (v6.isIPv4MappedAddress()) return v6.toIPv4Address().toString();
  // One customer line usually holds a whole /64: count it as one client.
  return `${v6.parts.slice(0, 4).map((p) => p.toString(16)).join(':')}::/64`;
}

function isJson(contentType: string): boolean {
  const semicolon = contentType.indexOf(';');
  return (semicolon < 0 ? contentType : contentType.slice(0, semicolon)).trim().toLowerCase() === 'application/json';
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

interface Answer {
  status?: number;
  body: unknown;
  cookie?: string;
}

interface Call {
  req: Incoming;
  current: CurrentSession | null;
  body: Record<string, unknown>;
}

interface RouteOptions {
  /** Needs a session (and, for a change, its CSRF token). */
  signedIn: boolean;
}

export function mountDashboard(app: TemplatedApp, ctx: DashboardContext): TemplatedApp {
  const files = loadStatic();
  const sessions = new Sessions(ctx.store, ctx.clock);
  const signupPlan = [...ctx.plans.keys()][0]!;
  // Ended sessions and attempt windows are removed at start and every 15 minutes (by every worker: it is idempotent).
  const prune = () => sessions.prune().catch((error: unknown) => ctx.log.error({ err: error }, 'pruning dashboard sessions failed'));
  void prune();
  setInterval(prune, PRUNE_EVERY_MS).unref();

  function incoming(res: HttpResponse, req: HttpRequest, params: number): Incoming {
    const forwardedFor = ctx.trustProxy ? lastOf(req.getHeader('x-forwarded-for')) : '';
    const address = ctx.trustProxy && ipaddr.isValid(forwardedFor) ? ipaddr.parse(forwardedFor) : clientAddress(clientBytes(res.getRemoteAddress()));
    const forwardedHost = ctx.trustProxy ? lastOf(req.getHeader('x-forwarded-host')) : '';
    return {
      params: Array.from({ length: params }, (_, i) => req.getParameter(i)),
      sessionId: Sessions.idFromCookie(req.getHeader('cookie')),
      csrf: req.getHeader('x-csrf-token'),
      origin: req.getHeader('origin'),
      fetchSite: req.getHeader('sec-fetch-site'),
      host: forwardedHost || req.getHeader('host'),
      secure: ctx.trustProxy && lastOf(req.getHeader('x-forwarded-proto')).toLowerCase() === 'https',
      address: addressName(address),
      contentType: req.getHeader('content-type'),
      contentLength: req.getHeader('content-length'),
      ifNoneMatch: req.getHeader('if-none-match'),
    };
  }

  /**
   * One answer per request, whether it comes at once or after an await;
   * nothing after an abort. A HEAD request is answered as GET would be,
   * without content (RFC 9110: bytes after its headers would be read as the
   * next answer).
   */
  function exchange(res: HttpResponse, req: HttpRequest) {
    const state = { aborted: false, done: false };
    const head = req.getMethod() === 'head';
    ctx.inflight.count++;
    res.onAborted(() => {
      state.aborted = true;
      finish();
    });
    function finish(): boolean {
      if (state.done) return false;
      state.done = true;
      ctx.inflight.count--;
      return !state.aborted;
    }
    return {
      send(req: Incoming | null, status: number, headers: [string, string][], body: string | Buffer = ''): void {
        if (!finish()) return;
        res.cork(() => {
          res.writeStatus(`${status} ${STATUS_CODES[status]}`);
          for (const [name, value] of SECURITY_HEADERS) res.writeHeader(name, value);
          if (req?.secure) res.writeHeader(...HSTS);
          for (const [name, value] of headers) res.writeHeader(name, value);
          if (head) endHead(res, Buffer.byteLength(body), ctx.draining());
          else res.end(body, ctx.draining());
        });
      },
    };
  }
  type Exchange = ReturnType<typeof exchange>;

  function sendJson(ex: Exchange, req: Incoming | null, status: number, json: string, cookie?: string, extra: [string, string][] = []): void {
    const headers: [string, string][] = [['Content-Type', 'application/json; charset=utf-8'], ['Cache-Control', 'no-store'], ...extra];
    if (cookie !== undefined) headers.push(['Set-Cookie', cookie]);
    ex.send(req, status, headers, json);
  }

  function sendError(ex: Exchange, req: Incoming | null, code: ErrorCode, message?: string, details: Record<string, unknown> = {}): void {
    const extra: [string, string][] = typeof details.retry_after === 'number' ? [['Retry-After', String(details.retry_after)]] : [];
    // A request whose session has ended gets its cookie cleared too.
    const cookie = code === 'signed_out' && req?.sessionId ? sessionCookie(null, req.secure) : undefined;
    sendJson(ex, req, ERROR_CODES[code].status, errorBody(code, details, message), cookie, extra);
  }

  function redirect(ex: Exchange, req: Incoming, to: string, clearCookie = false): void {
    const headers: [string, string][] = [['Location', to], ['Cache-Control', 'no-store']];
    if (clearCookie) headers.push(['Set-Cookie', sessionCookie(null, req.secure)]);
    ex.send(req, 303, headers);
  }

  function sendFile(ex: Exchange, req: Incoming, file: StaticFile | undefined, cacheControl: string): void {
    if (file === undefined) return sendNotFoundPage(ex, req);
    const headers: [string, string][] = [['Cache-Control', cacheControl], ['ETag', file.etag]];
    if (req.ifNoneMatch === file.etag) return ex.send(req, 304, headers);
    ex.send(req, 200, [['Content-Type', file.type], ...headers], file.body);
  }

  function sendNotFoundPage(ex: Exchange, req: Incoming): void {
    const page = files.get('not-found.html')!;
    ex.send(req, 404, [['Content-Type', page.type], ['Cache-Control', 'no-store']], page.body);
  }

  function crossSite(req: Incoming): boolean {
    if (req.fetchSite !== '' && req.fetchSite !== 'same-origin') return true;
    if (req.origin === '') return false; // not from a browser page: the CSRF token (or its absence) decides
    try {
      return new URL(req.origin).host !== req.host;
    } catch {
      return true; // "null" and other opaque origins
    }
  }

  /** Reads a JSON object body within MAX_BODY; answers 413/415/400 itself. */
  function readBody(res: HttpResponse, ex: Exchange, req: Incoming, then: (body: Record<string, unknown>) => void): void {
    if (!isJson(req.contentType)) return sendError(ex, req, 'unsupported_media_type');
    // Answered at once, the body passed over, the connection kept: see http.ts.
    if (req.contentLength !== '' && Number(req.contentLength) > MAX_BODY) return sendError(ex, req, 'payload_too_large', undefined, { max_bytes: MAX_BODY });
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    res.onData((chunk, isLast) => {
      if (over) return;
      size += chunk.byteLength;
      if (size > MAX_BODY) {
        over = true;
        return sendError(ex, req, 'payload_too_large', undefined, { max_bytes: MAX_BODY });
      }
      chunks.push(Buffer.from(chunk.slice(0))); // the chunk dies with this callback: copy
      if (!isLast) return;
      let body: unknown;
      try {
        body = JSON.parse(utf8.decode(Buffer.concat(chunks)));
      } catch {
        return sendError(ex, req, 'invalid_json');
      }
      if (typeof body !== 'object' || body === null || Array.isArray(body)) return sendError(ex, req, 'invalid_json');
      then(body as Record<string, unknown>);
    });
  }

  const allowed = new Map<string, string[]>();

  /** A JSON endpoint: checks, body, then the handler; an IprError answers its code, anything else 500. */
  function route(method: 'get' | 'post' | 'put' | 'del', pattern: string, options: RouteOptions, handler: (call: Call) => Answer | Promise<Answer>): void {
    const params = pattern.split('/').filter((s) => s.startsWith(':')).length;
    allowed.set(pattern, [...(allowed.get(pattern) ?? []), ...(method === 'del' ? ['DELETE'] : method === 'get' ? ['GET', 'HEAD'] : [method.toUpperCase()])]);
    const handle = (res: HttpResponse, req: HttpRequest) => {
      const ex = exchange(res, req);
      let r: Incoming | null = null;
      const fail = (error: unknown) => {
        if (error instanceof IprError && error.code === 'invalid_argument') return sendError(ex, r, 'invalid_request', error.message);
        if (error instanceof IprError && ERROR_CODES[error.code].status < 500) return sendError(ex, r, error.code, error.message, error.details);
        ctx.log.error({ route: pattern, err: error }, 'dashboard request failed');
        sendError(ex, r, 'internal_error');
      };
      try {
        const request = (r = incoming(res, req, params));
        const change = method !== 'get';
        if (change && crossSite(request)) return sendError(ex, request, 'cross_site');
        const current = sessions.current(request.sessionId);
        if (options.signedIn && current === null) return sendError(ex, request, 'signed_out');
        if (options.signedIn && change && !Sessions.csrfMatches(current!.session, request.csrf)) return sendError(ex, request, 'csrf_failed');
        const run = (body: Record<string, unknown>) => {
          Promise.resolve()
            .then(() => handler({ req: request, current, body }))
            .then((answer) => sendJson(ex, request, answer.status ?? 200, JSON.stringify(answer.body), answer.cookie), fail);
        };
        if (method === 'post' || method === 'put') readBody(res, ex, request, run);
        else run({});
      } catch (error) {
        fail(error);
      }
    };
    app[method](pattern, handle);
    if (method === 'get') app.head(pattern, handle);
  }

  // Sessions.
  route('post', '/dashboard/api/session', { signedIn: false }, async ({ req, body }) => {
    try {
      const { id, session, account } = await sessions.signIn(body.email, body.password, req.address, req.sessionId);
      ctx.log.info({ event: 'sign_in', account: account.email }, 'dashboard sign-in');
      return { body: accountView(ctx, account, session.csrf), cookie: sessionCookie(id, req.secure) };
    } catch (error) {
      // Never the email typed: it may be a password typed in the wrong field.
      if (error instanceof IprError) ctx.log.warn({ event: error.code, address: req.address }, 'dashboard sign-in refused');
      throw error;
    }
  });
  route('del', '/dashboard/api/session', { signedIn: true }, async ({ req, current }) => {
    await sessions.signOut(current!.id);
    return { body: { signed_out: true }, cookie: sessionCookie(null, req.secure) };
  });
  route('del', '/dashboard/api/sessions', { signedIn: true }, ({ req, current }) => {
    sessions.signOutEverywhere(current!);
    ctx.log.info({ event: 'sign_out_everywhere', account: current!.account.email }, 'dashboard signed out everywhere');
    return { body: { signed_out: true }, cookie: sessionCookie(null, req.secure) };
  });
  route('put', '/dashboard/api/password', { signedIn: true }, async ({ req, current, body }) => {
    const { id, session, account } = await sessions.changePassword(current!, body.current, body.password, req.address);
    ctx.log.info({ event: 'password_changed', account: account.email }, 'dashboard password changed; the other sessions ended');
    return { body: accountView(ctx, account, session.csrf), cookie: sessionCookie(id, req.secure) };
  });
  route('post', '/dashboard/api/sign-up', { signedIn: false }, async ({ req, body }) => {
    if (!ctx.signup) throw new IprError('signup_disabled');
    const { email, created } = await sessions.signUp(body.email, body.password, signupPlan, req.address, ctx.signupsPerDay);
    // An email with an account gets the same answer; only the operator's log tells.
    if (created) ctx.log.info({ event: 'sign_up', account: email, plan: signupPlan }, 'dashboard sign-up');
    else ctx.log.warn({ event: 'sign_up_existing', account: email, address: req.address }, 'dashboard sign-up for an email that has an account');
    return { status: 202, body: { message: SIGNED_UP } };
  });

  // The signed-in account.
  route('get', '/dashboard/api/account', { signedIn: true }, ({ current }) => ({ body: accountView(ctx, current!.account, current!.session.csrf) }));
  route('get', '/dashboard/api/keys', { signedIn: true }, ({ current }) => ({ body: keysView(ctx, current!.account) }));
  route('post', '/dashboard/api/keys', { signedIn: true }, async ({ current, body }) => {
    const created = await createKey(ctx, current!.account, body.name, body.allowed, ctx.keysPerDay);
    ctx.log.info({ event: 'key_created', account: current!.account.email, prefix: created.prefix }, 'dashboard created a key');
    return { status: 201, body: created };
  });
  route('del', '/dashboard/api/keys/:prefix', { signedIn: true }, ({ req, current }) => {
    const record = ctx.store.revokeKey(current!.account.email, req.params[0]!);
    ctx.log.info({ event: 'key_revoked', account: current!.account.email, prefix: record.prefix }, 'dashboard revoked a key');
    return { body: { prefix: record.prefix, revoked: record.revoked } };
  });
  route('put', '/dashboard/api/keys/:prefix/allowed', { signedIn: true }, ({ req, current, body }) => {
    const list = body.allowed;
    if (!(Array.isArray(list) && list.every((a) => typeof a === 'string'))) throw new IprError('invalid_request', 'allowed must be a list of addresses or CIDR prefixes');
    const record = ctx.store.setAllowed(current!.account.email, req.params[0]!, list);
    if (record.revoked !== null) throw new IprError('key_missing', `no key ${record.prefix} in account ${current!.account.email}`);
    return { body: keyView(ctx, record) };
  });
  route('get', '/dashboard/api/usage', { signedIn: true }, ({ current }) => ({ body: usageView(ctx, current!.account) }));
  // What any visitor may know: whether sign-up is open, and the data sources with their licenses.
  route('get', '/dashboard/api/about', { signedIn: false }, () => ({ body: { signup: ctx.signup, sources: sourcesView(ctx) } }));

  for (const [pattern, methods] of allowed) {
    app.any(pattern, (res, req) => {
      const ex = exchange(res, req);
      sendJson(ex, null, 405, errorBody('method_not_allowed', { allowed: methods }), undefined, [['Allow', methods.join(', ')]]);
    });
  }

  // Pages and their files; HEAD answers as GET (exchange leaves the content out).
  const getOrHead = (pattern: string, handler: (res: HttpResponse, req: HttpRequest) => void) => app.get(pattern, handler).head(pattern, handler);
  const toKeys = (res: HttpResponse, req: HttpRequest) => redirect(exchange(res, req), incoming(res, req, 0), '/dashboard/keys');
  getOrHead('/dashboard', toKeys);
  getOrHead('/dashboard/', toKeys);
  getOrHead('/dashboard/:page', (res, req) => {
    const ex = exchange(res, req);
    const r = incoming(res, req, 1);
    const page = r.params[0]!;
    const needsSession = PAGES.get(page);
    if (needsSession === undefined || (page === 'sign-up' && !ctx.signup)) return sendNotFoundPage(ex, r);
    const signedIn = sessions.current(r.sessionId) !== null;
    if (needsSession && !signedIn) return redirect(ex, r, '/dashboard/sign-in', r.sessionId !== null);
    if (!needsSession && signedIn) return redirect(ex, r, '/dashboard/keys');
    // no-store: after sign-out, Back must not show a signed-in page from memory.
    sendFile(ex, r, files.get(`${page}.html`), 'no-store');
  });
  getOrHead('/dashboard/assets/:name', (res, req) => {
    const ex = exchange(res, req);
    const r = incoming(res, req, 1);
    sendFile(ex, r, files.get(`assets/${r.params[0]}`), 'no-cache');
  });
  app.any('/dashboard/*', (res, req) => {
    const ex = exchange(res, req);
    const r = incoming(res, req, 0);
    if (req.getUrl().startsWith('/dashboard/api/')) sendError(ex, r, 'not_found');
    else sendNotFoundPage(ex, r);
  });
  return app;
}
