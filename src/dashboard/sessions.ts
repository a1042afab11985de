/**
 * Dashboard sessions: sign-in with a limit on attempts, the session cookie,
 * expiry, CSRF tokens. Sessions and attempt counts are stored in the customer
 * store (src/store/types.ts), so every worker thread, process and node sees the same ones.
 *
 * - A session id is 32 random bytes, sent only in an HttpOnly, SameSite=Strict
 *   cookie (Secure when the request came over HTTPS); only its SHA-256 is stored.
 * - A new id at every sign-in, and none before it: nobody can plant an id.
 * - A session ends after 30 minutes without a request, and 12 hours after
 *   sign-in whatever happens; all of an account's sessions end when it is
 *   suspended, signs out everywhere or changes its password (the session
 *   carries the account's session generation, checked on every request).
 * - Every change needs the session's CSRF token in the X-CSRF-Token header
 *   (routes.ts also refuses cross-site requests by Origin and Sec-Fetch-Site).
 * - Sign-in attempts are limited and slowed by sign-in-limits.ts: hard per
 *   account and client address (IPv6 by /64) and per client, only by a delay
 *   per account, so that nobody can lock a customer out.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { IprError } from '../errors.js';
import type { Account, CustomerStore, Session } from '../store/types.js';
import { normaliseEmail } from '../store/emails.js';
import { checkNewPassword, MAX_PASSWORD_LENGTH } from '../store/passwords.js';
import type { Clock } from '../clock.js';
import { SignInLimits } from './sign-in-limits.js';

export const SESSION_COOKIE = 'ipr_session';
export const SESSION_IDLE_MS = 30 * 60_000;
export const SESSION_MAX_MS = 12 * 3_600_000;
/** `seen` is written at most this often: a session's idle expiry is this coarse. */
const TOUCH_EVERY_MS = 60_000;

const DAY_MS = 86_400_000;

const SESSION_ID = /^[A-Za-z0-9_-]{43}$/;

export interface CurrentSession {
  id: string;
  session: Session;
  account: Account;
}

export type SignIn = { id: string; session: Session; account: Account };

/** Whether `session` belongs to the account's current generation (see Account.sessionGeneration). */
function current(session: Session, account: Account): boolean {
  return (session.generation ?? 0) === (account.sessionGeneration ?? 0);
}

export class Sessions {
  readonly #limits: SignInLimits;

  constructor(
    private readonly store: CustomerStore,
    private readonly clock: Clock,
  ) {
    this.#limits = new SignInLimits(store, clock);
  }

  /** The session id a Cookie header carries, when it has one of the right form. */
  static idFromCookie(header: string): string | null {
    for (const part of header.split(';')) {
      const eq = part.indexOf('=');
      if (eq < 0 || part.slice(0, eq).trim() !== SESSION_COOKIE) continue;
      const value = part.slice(eq + 1).trim();
      if (SESSION_ID.test(value)) return value;
    }
    return null;
  }

  expired(session: Session, now = this.clock.now()): boolean {
    return now - session.seen >= SESSION_IDLE_MS || now - session.created >= SESSION_MAX_MS || now < session.created;
  }

  /**
   * The signed-in session of a request, or null: no cookie, an unknown or
   * expired session, or an account that is gone or suspended.
   */
  async current(id: string | null): Promise<CurrentSession | null> {
    if (id === null) return null;
    const session = await this.store.session(id);
    if (session === undefined) return null;
    const now = this.clock.now();
    if (this.expired(session, now)) return null;
    const account = await this.store.account(session.account);
    if (account === undefined || account.status !== 'active' || !current(session, account)) return null;
    if (now - session.seen >= TOUCH_EVERY_MS) {
      // In the background: a lost touch only makes the idle expiry a minute earlier.
      void this.store.touchSession(id, session, now, this.#ttl(session, now)).catch(() => undefined);
    }
    return { id, session, account };
  }

  /** Whether the header carries the session's CSRF token (compared in constant time). */
  static csrfMatches(session: Session, header: string): boolean {
    const expected = Buffer.from(session.csrf);
    const given = Buffer.from(header);
    return given.length === expected.length && timingSafeEqual(given, expected);
  }

  /**
   * Checks the password within the attempt limits (sign-in-limits.ts: it may
   * wait up to 8 s first) and starts a new session.
   * `address` names the client (see routes.ts); `previous` is the session id
   * the request carried, ended here so that an id never outlives a sign-in.
   * Throws IprError: sign_in_limited (details.retry_after in seconds),
   * sign_in_failed, account_suspended.
   */
  async signIn(email: unknown, password: unknown, address: string, previous: string | null): Promise<SignIn> {
    if (typeof email !== 'string' || typeof password !== 'string' || [...password].length > MAX_PASSWORD_LENGTH) throw new IprError('sign_in_failed');
    let normal: string;
    try {
      normal = normaliseEmail(email);
    } catch {
      throw new IprError('sign_in_failed');
    }
    await this.#limits.admit(normal, address);
    const account = await this.store.verifyPassword(normal, password);
    if (account === undefined) {
      await this.#limits.failed(normal);
      throw new IprError('sign_in_failed');
    }
    await this.#limits.succeeded(normal, address);
    if (account.status !== 'active') throw new IprError('account_suspended');
    return this.#start(account, previous);
  }

  /**
   * Self sign-up (when the operator allows it): creates the account on
   * `plan`, unless the email has one. The caller answers both cases the
   * same way and signs nobody in: whether an email has an account is not
   * for a stranger to learn (the page signs in next, with the password just
   * chosen). Both cases do the same work (the password is hashed first).
   * Each sign-up counts as an attempt of the client address, so one address
   * cannot make accounts without end, and all of them together make at most
   * `perDay` in 24 hours (signup_limited). Resolves with the normal email and
   * whether an account was made.
   */
  async signUp(email: unknown, password: unknown, plan: string, address: string, perDay: number): Promise<{ email: string; created: boolean }> {
    if (typeof email !== 'string' || typeof password !== 'string') throw new IprError('invalid_request', 'email and password are required');
    checkNewPassword(password);
    let normal: string;
    try {
      normal = normaliseEmail(email);
    } catch {
      throw new IprError('invalid_request', 'that is not an email address');
    }
    await this.#limits.admitClient(address);
    // From everyone together: addresses are many, the accounts (and key slots) they can take are not.
    if ((await this.store.countAttempt([{ name: 'sign-ups', max: perDay, windowMs: DAY_MS }], this.clock.now())) > 0) {
      await this.store.countRefusal('signups_per_day');
      throw new IprError('signup_limited');
    }
    try {
      await this.store.createAccount(normal, password, plan);
      return { email: normal, created: true };
    } catch (error) {
      if (error instanceof IprError && error.code === 'account_exists') return { email: normal, created: false };
      throw error;
    }
  }

  async signOut(id: string): Promise<void> {
    await this.store.endSession(id);
  }

  /**
   * Changes the signed-in account's password: the current one is required
   * (counted as a sign-in attempt: a stolen session cannot guess it without
   * limit), every session of the account ends, and this browser goes on in
   * a new session. Throws IprError: invalid_argument (the new password),
   * password_wrong, sign_in_limited.
   */
  async changePassword(signedIn: CurrentSession, currentPassword: unknown, password: unknown, address: string): Promise<SignIn> {
    if (typeof currentPassword !== 'string' || typeof password !== 'string') throw new IprError('invalid_request', 'current and password are required');
    checkNewPassword(password);
    const email = signedIn.account.email;
    await this.#limits.admit(email, address);
    if ((await this.store.verifyPassword(email, currentPassword)) === undefined) {
      await this.#limits.failed(email);
      throw new IprError('password_wrong');
    }
    await this.#limits.succeeded(email, address);
    const account = await this.store.setPassword(email, password);
    return this.#start(account, signedIn.id);
  }

  /** Ends every session of the account, this one included. */
  async signOutEverywhere(signedIn: CurrentSession): Promise<void> {
    await this.store.endSessions(signedIn.account.email);
  }

  /** Removes expired sessions, sessions of an earlier generation and ended attempt windows from the store. */
  prune(): Promise<number> {
    const now = this.clock.now();
    return this.store.pruneDashboardState((s, account) => this.expired(s, now) || account === undefined || !current(s, account), now);
  }

  /** How long the store keeps a session seen at `now` (a store with TTLs ends it then by itself): until idle, or its 12 hours end. */
  #ttl(session: Session, now: number): number {
    return Math.min(SESSION_IDLE_MS, session.created + SESSION_MAX_MS - now);
  }

  async #start(account: Account, previous: string | null): Promise<SignIn> {
    const now = this.clock.now();
    const session: Session = { account: account.email, csrf: randomBytes(32).toString('base64url'), created: now, seen: now, generation: account.sessionGeneration ?? 0 };
    const [id] = await Promise.all([this.store.createSession(session, this.#ttl(session, now)), previous === null ? undefined : this.store.endSession(previous)]);
    return { id, session, account };
  }
}

/** The Set-Cookie value of a session; `id` null clears the cookie. */
export function sessionCookie(id: string | null, secure: boolean): string {
  const attributes = `Path=/dashboard; HttpOnly; SameSite=Strict${secure ? '; Secure' : ''}`;
  return id === null ? `${SESSION_COOKIE}=; ${attributes}; Max-Age=0` : `${SESSION_COOKIE}=${id}; ${attributes}; Max-Age=${SESSION_MAX_MS / 1000}`;
}
