/**
 * Text from outside (customers' emails and key names, feed URLs) on its way
 * to where it could do harm: refused when it holds characters nobody types,
 * escaped before a terminal sees it, stripped of credentials before a log or
 * an HTTP answer does.
 */

/**
 * Control (C0, DEL, C1) and format characters (zero-width, bidirectional
 * overrides, soft hyphen...), line and paragraph separators, lone
 * surrogates, private-use and unassigned code points: invisible or acted on
 * by terminals, never part of a name or an address someone types.
 */
const UNSAFE = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}]/u;
const UNSAFE_ALL = new RegExp(UNSAFE.source, 'gu');

export function hasControlOrFormat(text: string): boolean {
  return UNSAFE.test(text);
}

function escape(character: string): string {
  const code = character.codePointAt(0)!;
  if (code < 0x100) return `\\x${code.toString(16).padStart(2, '0')}`;
  if (code < 0x10000) return `\\u${code.toString(16).padStart(4, '0')}`;
  return `\\u{${code.toString(16)}}`;
}

/**
 * `text` as a terminal may print it: every character of hasControlOrFormat
 * written as an escape (`\x1b`, `\u202e`), so that a name can neither move
 * the cursor, recolour, retitle nor reorder what the operator reads.
 */
export function terminalSafe(text: string): string {
  return text.replace(UNSAFE_ALL, escape);
}

/**
 * A URL as logs, warnings and HTTP answers may show it: without user
 * information (`user:password@`) or query string, where feed credentials
 * and tokens travel. Not a URL: returned as it is.
 */
export function redactUrl(text: string): string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return text;
  }
  const credentials = url.username !== '' || url.password !== '';
  const query = url.search !== '';
  url.username = '';
  url.password = '';
  url.search = '';
  url.hash = '';
  const bare = url.href;
  if (!credentials && !query) return bare;
  const at = bare.indexOf('//') + 2;
  return `${credentials ? `${bare.slice(0, at)}REDACTED@${bare.slice(at)}` : bare}${query ? '?REDACTED' : ''}`;
}

/** `text` with every http(s) URL in it redacted (error messages that quote a URL). */
export function redactUrls(text: string): string {
  return text.replace(/\bhttps?:\/\/[^\s"'<>]+/g, (url) => redactUrl(url));
}
