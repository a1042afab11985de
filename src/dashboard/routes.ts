/**
 * The customer dashboard on a worker's uWebSockets.js app: its pages (static
 * files, static.ts) under /dashboard, its JSON endpoints under
 * /dashboard/api. The /v1 routes are untouched and unknown paths outside
 * /dashboard still reach the API's 404.
 *
 * Every answer carries the security headers below. Pages that need a session
 * redirect to the sign-in page without one. Changes (POST, PUT, DELETE) are
 * refused when cross-site (Sec-Fetch-Site, Origin) and, when signed in,
 * without the session's CSRF token in X-CSRF-Token. Request bodies are JSON
 * only: a cross-site HTML form cannot send one.
 *
 * A request's life (abort, one answer, body, HEAD) is the exchange's
 * (src/http/exchange.ts); the headers a handler needs are read in the
 * synchronous top of the request (`Incoming`), before anything waits.
 */
import type { HttpRequest, HttpResponse, TemplatedApp } from 'uWebSockets.js';
import ipaddr from 'ipaddr.js';
import type { Clock } from '../clock.js';
import { ERROR_CODES, errorBody, IprError, type ErrorCode } from '../errors.js';
import { addressOf, Exchange, JSON_TYPE, lastOf, parseJsonObject, type ExchangeScope, type Header } from '../http/exchange.js';
import { Router, type Method } from '../http/router.js';
import type { Logger } from '../log.js';
import type { CustomerStore } from '../store/types.js';
import { Sessions, sessionCookie, type CurrentSession } from './sessions.js';
import { loadStatic, type StaticFile } from './static.js';
import { accountView, createKey, keysView, keyView, sourcesView, usageView, type ViewContext } from './views.js';

export interface DashboardOptions {
  /** Anyone may make an account (`ipr serve --signup`); it gets the first plan of the plans file. */
  signup: boolean;
  /**
   * The server runs behind a reverse proxy (`ipr serve --trust-proxy`): its
   * X-Forwarded-Proto says whether the client used HTTPS (then cookies are
   * Secure), the last address of X-Forwarded-For is the client's (sign-in
   * limits; the exchange reads it), X-Forwarded-Host the host the client
   * asked for (Origin check).
   */
  trustProxy: boolean;
  /** Sign-ups taken in 24 hours, from everyone together (`--max-signups-per-day`). */
  signupsPerDay: number;
  /** Keys made in the dashboard in 24 hours, for every account together (`--max-keys-per-day`). */
  keysPerDay: number;
}

export interface DashboardContext extends ViewContext, DashboardOptions, ExchangeScope {
  /** Whichever store serves the customers (LMDB of the data folder, or Redis): the dashboard does not know which. */
  store: CustomerStore;
  clock: Clock;
  log: Logger;
}

const MAX_BODY = 8 * 1024;
const PRUNE_EVERY_MS = 15 * 60_000;

/** Sent with every dashboard answer. No inline script or style anywhere: the pages load theirs from /dashboard/assets. */
const SECURITY_HEADERS: Header[] = [
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
const HSTS: Header = ['Strict-Transport-Security', 'max-age=31536000'];
const NO_STORE: Header = ['Cache-Control', 'no-store'];
/** The answer to every valid sign-up, whether the email had an account or not. */
const SIGNED_UP = 'If this email can have an account, it has one now: sign in with it and the password you chose.';

/**
 * Pages, and whether they need a session (without one: to the sign-in page;
 * with one, the others go to the keys page). A Map: a plain object would
 * find "__proto__" and "constructor" too.
 */
const PAGES = new Map<string, boolean>([
  ['keys', true],
  ['usage', true],
  ['account', true],
  ['sign-in', false],
  ['sign-up', false],
]);

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

function addressName(address: ipaddr.IPv4 | ipaddr.IPv6): string {
  if (address.kind() === 'ipv4') return address.toString();
  const v6 = address as ipaddr.IPv6;
  if (v6.isIPv4MappedAddress()) return v6.toIPv4Address().toString();
  // One customer line usually holds a whole /64: count it as one client.
  return `${v6.parts.slice(0, 4).map((p) => p.toString(16)).join(':')}::/64`;
}

/** A dashboard answer: the security headers (HSTS too over HTTPS) on every one. */
class DashboardExchange extends Exchange {
  readonly req: Incoming;

  /** Begins in the route's synchronous top: `params` route parameters are read with the rest of `req`. */
  constructor(res: HttpResponse, req: HttpRequest, scope: ExchangeScope, params: number) {
    super(res, req, scope, req.getMethod() === 'head');
    this.req = this.#incoming(req, params, scope.trustProxy);
  }

  /** What any handler may need of the request (nothing here throws). */
  #incoming(req: HttpRequest, params: number, trust: boolean): Incoming {
    const forwardedHost = trust ? lastOf(req.getHeader('x-forwarded-host')) : '';
    return {
      params: Array.from({ length: params }, (_, i) => req.getParameter(i)),
      sessionId: Sessions.idFromCookie(req.getHeader('cookie')),
      csrf: req.getHeader('x-csrf-token'),
      origin: req.getHeader('origin'),
      fetchSite: req.getHeader('sec-fetch-site'),
      host: forwardedHost || req.getHeader('host'),
      secure: trust && lastOf(req.getHeader('x-forwarded-proto')).toLowerCase() === 'https',
      address: addressName(addressOf(this.clientBytes())),
      contentType: req.getHeader('content-type'),
      contentLength: req.getHeader('content-length'),
      ifNoneMatch: req.getHeader('if-none-match'),
    };
  }

  protected override writeHeaders(res: HttpResponse): void {
    for (const [name, value] of SECURITY_HEADERS) res.writeHeader(name, value);
    if (this.req.secure) res.writeHeader(...HSTS);
  }

  sendJson(status: number, json: string, headers: Header[] = []): void {
    this.send(status, json, [['Content-Type', JSON_TYPE], NO_STORE, ...headers]);
  }

  sendError(code: ErrorCode, message?: string, details: Record<string, unknown> = {}): void {
    const headers: Header[] = typeof details.retry_after === 'number' ? [['Retry-After', String(details.retry_after)]] : [];
    // A request whose session has ended gets its cookie cleared too.
    if (code === 'signed_out' && this.req.sessionId) headers.push(['Set-Cookie', sessionCookie(null, this.req.secure)]);
    this.sendJson(ERROR_CODES[code].status, errorBody(code, details, message), headers);
  }

  redirect(to: string, clearCookie = false): void {
    const headers: Header[] = [['Location', to], NO_STORE];
    if (clearCookie) headers.push(['Set-Cookie', sessionCookie(null, this.req.secure)]);
    this.send(303, '', headers);
  }

  /** A file, or 304 when the client holds this version. */
  sendFile(file: StaticFile, cacheControl: string): void {
    const headers: Header[] = [['Cache-Control', cacheControl], ['ETag', file.etag]];
    if (this.req.ifNoneMatch === file.etag) return this.send(304, '', headers);
    this.send(200, file.body, [['Content-Type', file.type], ...headers]);
  }

  /** Whether the browser says the request comes from another site. */
  crossSite(): boolean {
    const { fetchSite, origin, host } = this.req;
    if (fetchSite !== '' && fetchSite !== 'same-origin') return true;
    if (origin === '') return false; // not from a browser page: the CSRF token (or its absence) decides
    try {
      return new URL(origin).host !== host;
    } catch {
      return true; // "null" and other opaque origins
    }
  }
}

/** What a JSON endpoint answers. */
interface Answer {
  status?: number;
  body: unknown;
  cookie?: string;
}

/** What a JSON endpoint is called with. */
interface Call {
  req: Incoming;
  current: CurrentSession | null;
  body: Record<string, unknown>;
}

type Endpoint = (call: Call) => Answer | Promise<Answer>;

class Dashboard {
  readonly ctx: DashboardContext;
  readonly files = loadStatic();
  readonly sessions: Sessions;
  readonly signupPlan: string;

  constructor(ctx: DashboardContext) {
    this.ctx = ctx;
    this.sessions = new Sessions(ctx.store, ctx.clock);
    this.signupPlan = [...ctx.plans.keys()][0]!;
  }

  begin(res: HttpResponse, req: HttpRequest, params: number): DashboardExchange {
    return new DashboardExchange(res, req, this.ctx, params);
  }

  notFoundPage(ex: DashboardExchange): void {
    const page = this.files.get('not-found.html')!;
    ex.send(404, page.body, [['Content-Type', page.type], NO_STORE]);
  }

  /** An IprError answers its code; anything else 500, logged. */
  fail(ex: DashboardExchange, route: string, error: unknown): void {
    if (error instanceof IprError && error.code === 'invalid_argument') return ex.sendError('invalid_request', error.message);
    if (error instanceof IprError && ERROR_CODES[error.code].status < 500) return ex.sendError(error.code, error.message, error.details);
    this.ctx.log.error({ route, err: error }, 'dashboard request failed');
    ex.sendError('internal_error');
  }

  /**
   * A JSON endpoint: the cross-site check for changes, the session (and its
   * CSRF token for a change) when `signedIn`, the body for POST and PUT, then
   * `endpoint`. The body is read while the session is looked up (uWS hands
   * body bytes only to a reader registered in the request's synchronous
   * top), and a refused body is answered only once the session passed.
   */
  endpoint(method: Method, pattern: string, signedIn: boolean, endpoint: Endpoint) {
    const params = pattern.split('/').filter((s) => s.startsWith(':')).length;
    const change = method !== 'get';
    return (res: HttpResponse, req: HttpRequest): void => {
      const ex = this.begin(res, req, params);
      const fail = (error: unknown) => this.fail(ex, pattern, error);
      try {
        if (change && ex.crossSite()) return ex.sendError('cross_site');
        const session = this.sessions.current(ex.req.sessionId);
        const body =
          method !== 'post' && method !== 'put'
            ? Promise.resolve({})
            : new Promise<Record<string, unknown>>((resolve, reject) =>
                ex.readBody(ex.req, MAX_BODY, {
                  onBody: (bytes) => {
                    try {
                      resolve(parseJsonObject(bytes));
                    } catch (error) {
                      reject(error);
                    }
                  },
                  onBodyRefused: (code, details) => reject(new IprError(code, undefined, details)),
                }),
              );
        body.catch(() => undefined); // answered below, after the session
        session
          .then(async (current) => {
            if (signedIn && current === null) return ex.sendError('signed_out');
            if (signedIn && change && !Sessions.csrfMatches(current!.session, ex.req.csrf)) return ex.sendError('csrf_failed');
            const answer = await endpoint({ req: ex.req, current, body: await body });
            const cookie: Header[] = answer.cookie === undefined ? [] : [['Set-Cookie', answer.cookie]];
            ex.sendJson(answer.status ?? 200, JSON.stringify(answer.body), cookie);
          })
          .catch(fail);
      } catch (error) {
        fail(error);
      }
    };
  }

  // The JSON endpoints.

  signIn: Endpoint = async ({ req, body }) => {
    try {
      const { id, session, account } = await this.sessions.signIn(body.email, body.password, req.address, req.sessionId);
      this.ctx.log.info({ event: 'sign_in', account: account.email }, 'dashboard sign-in');
      return { body: accountView(this.ctx, account, session.csrf), cookie: sessionCookie(id, req.secure) };
    } catch (error) {
      // Never the email typed: it may be a password typed in the wrong field.
      if (error instanceof IprError) this.ctx.log.warn({ event: error.code, address: req.address }, 'dashboard sign-in refused');
      throw error;
    }
  };

  signOut: Endpoint = async ({ req, current }) => {
    await this.sessions.signOut(current!.id);
    return { body: { signed_out: true }, cookie: sessionCookie(null, req.secure) };
  };

  signOutEverywhere: Endpoint = async ({ req, current }) => {
    await this.sessions.signOutEverywhere(current!);
    this.ctx.log.info({ event: 'sign_out_everywhere', account: current!.account.email }, 'dashboard signed out everywhere');
    return { body: { signed_out: true }, cookie: sessionCookie(null, req.secure) };
  };

  changePassword: Endpoint = async ({ req, current, body }) => {
    const { id, session, account } = await this.sessions.changePassword(current!, body.current, body.password, req.address);
    this.ctx.log.info({ event: 'password_changed', account: account.email }, 'dashboard password changed; the other sessions ended');
    return { body: accountView(this.ctx, account, session.csrf), cookie: sessionCookie(id, req.secure) };
  };

  signUp: Endpoint = async ({ req, body }) => {
    if (!this.ctx.signup) throw new IprError('signup_disabled');
    const { email, created } = await this.sessions.signUp(body.email, body.password, this.signupPlan, req.address, this.ctx.signupsPerDay);
    // An email with an account gets the same answer; only the operator's log tells.
    if (created) this.ctx.log.info({ event: 'sign_up', account: email, plan: this.signupPlan }, 'dashboard sign-up');
    else this.ctx.log.warn({ event: 'sign_up_existing', account: email, address: req.address }, 'dashboard sign-up for an email that has an account');
    return { status: 202, body: { message: SIGNED_UP } };
  };

  account: Endpoint = ({ current }) => ({ body: accountView(this.ctx, current!.account, current!.session.csrf) });

  keys: Endpoint = async ({ current }) => ({ body: await keysView(this.ctx, current!.account) });

  createKey: Endpoint = async ({ current, body }) => {
    const created = await createKey(this.ctx, current!.account, body.name, body.allowed, this.ctx.keysPerDay);
    this.ctx.log.info({ event: 'key_created', account: current!.account.email, prefix: created.prefix }, 'dashboard created a key');
    return { status: 201, body: created };
  };

  revokeKey: Endpoint = async ({ req, current }) => {
    const record = await this.ctx.store.revokeKey(current!.account.email, req.params[0]!);
    this.ctx.log.info({ event: 'key_revoked', account: current!.account.email, prefix: record.prefix }, 'dashboard revoked a key');
    return { body: { prefix: record.prefix, revoked: record.revoked } };
  };

  setAllowed: Endpoint = async ({ req, current, body }) => {
    const list = body.allowed;
    if (!(Array.isArray(list) && list.every((a) => typeof a === 'string'))) throw new IprError('invalid_request', 'allowed must be a list of addresses or CIDR prefixes');
    const record = await this.ctx.store.setAllowed(current!.account.email, req.params[0]!, list);
    if (record.revoked !== null) throw new IprError('key_missing', `no key ${record.prefix} in account ${current!.account.email}`);
    return { body: await keyView(this.ctx, record) };
  };

  usage: Endpoint = async ({ current }) => ({ body: await usageView(this.ctx, current!.account) });

  /** What any visitor may know: whether sign-up is open, and the data sources with their licenses. */
  about: Endpoint = () => ({ body: { signup: this.ctx.signup, sources: sourcesView(this.ctx) } });

  // The pages and their files.

  toKeys = (res: HttpResponse, req: HttpRequest): void => this.begin(res, req, 0).redirect('/dashboard/keys');

  page = (res: HttpResponse, req: HttpRequest): void => {
    const ex = this.begin(res, req, 1);
    const page = ex.req.params[0]!;
    const needsSession = PAGES.get(page);
    if (needsSession === undefined || (page === 'sign-up' && !this.ctx.signup)) return this.notFoundPage(ex);
    this.sessions.current(ex.req.sessionId).then((current) => {
      const signedIn = current !== null;
      if (needsSession && !signedIn) return ex.redirect('/dashboard/sign-in', ex.req.sessionId !== null);
      if (!needsSession && signedIn) return ex.redirect('/dashboard/keys');
      // no-store: after sign-out, Back must not show a signed-in page from memory.
      ex.sendFile(this.files.get(`${page}.html`)!, 'no-store');
    }, (error: unknown) => this.fail(ex, '/dashboard/:page', error));
  };

  asset = (res: HttpResponse, req: HttpRequest): void => {
    const ex = this.begin(res, req, 1);
    const file = this.files.get(`assets/${ex.req.params[0]}`);
    if (file === undefined) return this.notFoundPage(ex);
    ex.sendFile(file, 'no-cache');
  };

  methodNotAllowed = (res: HttpResponse, req: HttpRequest, allowed: string[]): void => {
    this.begin(res, req, 0).sendJson(405, errorBody('method_not_allowed', { allowed }), [['Allow', allowed.join(', ')]]);
  };

  /** Under /dashboard, nothing else: the API's error for /dashboard/api, the not-found page elsewhere. */
  notFound = (res: HttpResponse, req: HttpRequest): void => {
    const api = req.getUrl().startsWith('/dashboard/api/');
    const ex = this.begin(res, req, 0);
    if (api) ex.sendError('not_found');
    else this.notFoundPage(ex);
  };
}

export function mountDashboard(app: TemplatedApp, ctx: DashboardContext): void {
  const d = new Dashboard(ctx);
  // Ended sessions and attempt windows are removed at start and every 15 minutes (by every worker: it is idempotent).
  const prune = () => d.sessions.prune().catch((error: unknown) => ctx.log.error({ err: error }, 'pruning dashboard sessions failed'));
  void prune();
  setInterval(prune, PRUNE_EVERY_MS).unref();

  const api = new Router(app);
  const endpoint = (method: Method, pattern: string, signedIn: boolean, handler: Endpoint) => api.add(method, pattern, d.endpoint(method, pattern, signedIn, handler));
  endpoint('post', '/dashboard/api/session', false, d.signIn);
  endpoint('del', '/dashboard/api/session', true, d.signOut);
  endpoint('del', '/dashboard/api/sessions', true, d.signOutEverywhere);
  endpoint('put', '/dashboard/api/password', true, d.changePassword);
  endpoint('post', '/dashboard/api/sign-up', false, d.signUp);
  endpoint('get', '/dashboard/api/account', true, d.account);
  endpoint('get', '/dashboard/api/keys', true, d.keys);
  endpoint('post', '/dashboard/api/keys', true, d.createKey);
  endpoint('del', '/dashboard/api/keys/:prefix', true, d.revokeKey);
  endpoint('put', '/dashboard/api/keys/:prefix/allowed', true, d.setAllowed);
  endpoint('get', '/dashboard/api/usage', true, d.usage);
  endpoint('get', '/dashboard/api/about', false, d.about);
  api.refuseOtherMethods(d.methodNotAllowed);

  // Pages: HEAD answers as GET (the exchange leaves the content out).
  new Router(app).add('get', '/dashboard', d.toKeys).add('get', '/dashboard/', d.toKeys).add('get', '/dashboard/:page', d.page).add('get', '/dashboard/assets/:name', d.asset);
  app.any('/dashboard/*', d.notFound);
}
