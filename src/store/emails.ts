/**
 * One mailbox, one account: the form an email address is stored and looked
 * up in.
 *
 * - Control and format characters (a NUL, an ANSI escape, a zero-width space,
 *   a bidirectional override) are refused: nobody types them, and they make
 *   one address look like another, or rewrite a terminal.
 * - NFKC: compatibility forms (full-width letters, NFD sequences) become the
 *   characters they stand for.
 * - The local part must be ASCII (RFC 5322 dot-atom, no quoted forms): a
 *   Cyrillic "а" in it would look like a Latin one. Internationalised local
 *   parts (RFC 6531) are rare enough to refuse.
 * - The domain may be internationalised; it is stored as its ASCII (IDNA,
 *   punycode) form, so a look-alike domain shows as the different domain it
 *   is (`xn--exmple-4nf.com`).
 * - Case is folded in both parts. Dots and `+tags` of the local part are
 *   kept: they are one mailbox at some providers and different mailboxes at
 *   others, and folding them would merge different people's accounts.
 */
import { domainToASCII } from 'node:url';
import { IprError } from '../errors.js';
import { hasControlOrFormat } from '../text.js';

const ATOM = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+";
const LOCAL_PART = new RegExp(`^${ATOM}(\\.${ATOM})*$`);
const LABEL = '[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?';
const DOMAIN = new RegExp(`^(${LABEL}\\.)+${LABEL}$`);

/** The stored form of `email`; throws IprError invalid_argument when it is not an address this service takes. */
export function normaliseEmail(email: string): string {
  const refuse = () => new IprError('invalid_argument', `not an email address: ${JSON.stringify(email)}`);
  if (email.length > 1024 || hasControlOrFormat(email)) throw refuse();
  const text = email.normalize('NFKC').trim();
  const at = text.lastIndexOf('@');
  const local = text.slice(0, at);
  const domain = at < 0 ? '' : domainToASCII(text.slice(at + 1));
  if (at < 0 || local.length > 64 || !LOCAL_PART.test(local) || domain.length > 253 || !DOMAIN.test(domain)) throw refuse();
  const normal = `${local.toLowerCase()}@${domain}`;
  if (normal.length > 254) throw refuse();
  return normal;
}
