/**
 * Passwords: the rule a new one must pass, and how they are stored (scrypt,
 * a 16-byte random salt per password) and checked (the same work whether or
 * not the account exists).
 *
 * The rule: 10 to 1024 characters, counted in code points (an emoji is one,
 * not two UTF-16 units); not only whitespace; not one of the most common
 * passwords (config/common-passwords.txt, compared in lower case). Longer
 * than 1024 proves nothing and makes scrypt work for it.
 */
import { randomBytes, scrypt as scryptCallback, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { IprError } from '../errors.js';

const scrypt = promisify(scryptCallback) as (password: string, salt: Buffer, length: number, options: object) => Promise<Buffer>;

export const MIN_PASSWORD_LENGTH = 10;
export const MAX_PASSWORD_LENGTH = 1024;
const SCRYPT = { N: 16384, r: 8, p: 1, length: 32 };
/** Checked instead when there is no account, so that both answers take the same work. */
const DUMMY_HASH = `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=`;

const COMMON = new Set(
  readFileSync(new URL('../../config/common-passwords.txt', import.meta.url), 'utf8')
    .split('\n')
    .filter((line) => line !== '' && !line.startsWith('#')),
);

/** Length in code points. */
function characters(text: string): number {
  let n = 0;
  for (const _ of text) n++;
  return n;
}

/** Throws IprError invalid_argument, with a message for the person choosing it, unless `password` may be a new password. */
export function checkNewPassword(password: string): void {
  const length = characters(password);
  if (length < MIN_PASSWORD_LENGTH || length > MAX_PASSWORD_LENGTH) {
    throw new IprError('invalid_argument', `a password needs ${MIN_PASSWORD_LENGTH} to ${MAX_PASSWORD_LENGTH} characters`);
  }
  if (/^\s+$/u.test(password)) throw new IprError('invalid_argument', 'a password cannot be only spaces');
  if (COMMON.has(password.toLowerCase())) throw new IprError('invalid_argument', 'that password is one of the most common: choose another');
}

/** The stored form of a new password (checked first). */
export async function hashPassword(password: string): Promise<string> {
  checkNewPassword(password);
  const salt = randomBytes(16);
  const hash = await scrypt(password, salt, SCRYPT.length, { N: SCRYPT.N, r: SCRYPT.r, p: SCRYPT.p });
  return `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$${salt.toString('base64')}$${hash.toString('base64')}`;
}

/** Whether `password` is the one `stored` was made from; `stored` undefined (no account) costs the same and answers false. */
export async function passwordMatches(password: string, stored: string | undefined): Promise<boolean> {
  const [scheme, N, r, p, salt, hash] = (stored ?? DUMMY_HASH).split('$');
  if (scheme !== 'scrypt' || !salt || !hash) return false;
  const expected = Buffer.from(hash, 'base64');
  const actual = await scrypt(password, Buffer.from(salt, 'base64'), expected.length, { N: Number(N), r: Number(r), p: Number(p) });
  return timingSafeEqual(actual, expected) && stored !== undefined;
}
