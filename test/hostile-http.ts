/**
 * A seeded generator of hostile HTTP/1.1 requests for the API, each with the
 * answer the server must give (test/http-fuzz.test.ts sends them).
 *
 * Two classes:
 * - requests whose framing uWebSockets.js 20.30 parses (the "wire" rules
 *   below, found by trying them one by one): their answer is computed here
 *   from docs/API.md, the order of checks in src/server/api.ts and a
 *   reference snapshot, exactly (status, error body, the headers that matter);
 * - requests whose framing it does not parse (broken request lines, header
 *   lines, chunking, lengths): uWS answers nothing and closes the connection
 *   when the client ends it (or after its idle timeout); whatever came
 *   before them on the connection is still answered exactly.
 *
 * Wire rules of uWS 20.30 the model relies on: header names are tokens of
 * letters, digits and "-" (any other character, or an empty name, and the
 * request gets no answer), compared case-insensitively; the first of
 * repeated headers is the one read (and the first Content-Length frames the
 * body); values lose surrounding spaces and tabs; at most 48 header lines;
 * Content-Length below 2^31; "Transfer-Encoding: chunked" in any case;
 * methods in upper case; the query string is not part of the path; a
 * header block of at most 4 KiB (a bigger one is parsed only when it
 * arrives in one read, otherwise the connection is closed, answers to the
 * requests before it on the connection included).
 */
import { ERROR_CODES, inputAsText } from '../src/errors.js';
import type { Snapshot } from '../src/snapshot.js';

/** The keys the generator uses, by what the server must make of them. */
export interface FuzzKeys {
  /** Active, on a plan whose limits the fuzzing never reaches. */
  valid: string;
  revoked: string;
  /** Of a suspended account: 403. */
  suspended: string;
  /** Allowed only from 192.0.2.0/24: 403 from loopback. */
  elsewhere: string;
  /** X-RateLimit-Limit of the valid key's plan (its per-second limit: no daily one). */
  validLimit: number;
}

export interface FuzzContext {
  keys: FuzzKeys;
  reference: Snapshot;
  /** GET /v1/openapi.json's content. */
  openapi: string;
  /** Addresses the valid requests ask about. */
  addresses: string[];
  /** Requests per second allowed without a valid key (docs/API.md "Limits": 20). */
  unkeyedPerSecond: number;
}

/** An answer the model allows, exactly. */
export interface Answer {
  status: number;
  body: string;
  /** Headers that must be there with these values. */
  headers: Record<string, string>;
}

export interface Hostile {
  kind: string;
  bytes: Buffer;
  /** Parsed by uWS: one of `answers` is the answer. Else null: no answer. */
  answers: Answer[] | null;
  /** A HEAD request (no content after the answer's headers). */
  head: boolean;
  /** Announces a body it does not send: nothing can follow it on the connection. */
  ends: boolean;
}

const JSON_TYPE = 'application/json; charset=utf-8';
const MAX_CHECK_BODY = 8 * 1024;
const MAX_BATCH_BODY = 64 * 1024;
const MAX_BATCH = 1000;

function errorText(code: keyof typeof ERROR_CODES, details: Record<string, unknown> = {}): string {
  return JSON.stringify({ error: code, message: ERROR_CODES[code].message, details });
}

/** A small seeded generator: uniform 32-bit values (mulberry32). */
export class Random {
  #state: number;
  constructor(seed: number) {
    this.#state = seed >>> 0;
  }
  next(): number {
    this.#state = (this.#state + 0x6d2b79f5) >>> 0;
    let z = this.#state;
    z = Math.imul(z ^ (z >>> 15), z | 1);
    z ^= z + Math.imul(z ^ (z >>> 7), z | 61);
    return (z ^ (z >>> 14)) >>> 0;
  }
  /** 0 <= n < max */
  int(max: number): number {
    return this.next() % max;
  }
  chance(p: number): boolean {
    return this.next() / 2 ** 32 < p;
  }
  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)]!;
  }
  bytes(n: number): Buffer {
    const b = Buffer.alloc(n);
    for (let i = 0; i < n; i++) b[i] = this.int(256);
    return b;
  }
  /** `n` characters of `alphabet`. */
  text(n: number, alphabet: string): string {
    let s = '';
    for (let i = 0; i < n; i++) s += alphabet[this.int(alphabet.length)];
    return s;
  }
}

const PRINTABLE = ' !"#$%&\'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~';
const TOKEN = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-';
const ADDRESS_CHARS = '0123456789abcdefABCDEF:.:./%[] x-';

/** Address forms docs/API.md rejects, and some it accepts, beside random ones. */
const ADDRESS_FORMS = [
  '', ' ', '8.8.8.8 ', ' 8.8.8.8', '8.8.8', '8.8.8.8.8', '010.1.1.1', '1.1.1.01', '0x8.8.8.8', '256.1.1.1', '1.2.3.-1',
  '8.8.8.8/32', '8.8.8.8:53', '[::1]', '[::1]:80', 'fe80::1%eth0', 'fe80::1%25eth0', '1::2::3', ':::', '1:2:3:4:5:6:7:8:9',
  '1:2:3:4:5:6:7', '::ffff:1.2.3', '::ffff:1.2.3.4.5', '::ffff:256.1.1.1', '2001:db8::/32', '2001:db8:::1', 'g::1', '12345::',
  'example.com', 'localhost', '١٢٣.١.١.١', '８.８.８.８', '8.8.8.8\u0000', '8.8.8.8\n', '\ufeff8.8.8.8', '0.0.0.0',
  '255.255.255.255', '127.0.0.1', '::', '::1', '::ffff:8.8.8.8', '::FFFF:8.8.8.8', '2001:DB8::1', 'fe80::1',
  '2001:0db8:0000:0000:0000:0000:0000:0001', '0:0:0:0:0:0:0:0', '1:2:3:4:5:6:1.2.3.4', '64:ff9b::8.8.8.8', 'x'.repeat(200),
];

/** What the model needs of a request that uWS parses. */
interface Parsed {
  method: string;
  /** The request target (path and query). */
  target: string;
  /** In order; names as sent. */
  headers: [string, string][];
  body: Buffer;
  /** Sent chunked instead of with Content-Length. */
  chunked: boolean;
  /** Content-Length to declare instead of the body's length (the body is then not sent: only for 413). */
  declared?: number;
}

function first(headers: [string, string][], name: string): string {
  const found = headers.find(([n]) => n.toLowerCase() === name);
  return found === undefined ? '' : found[1].replace(/^[ \t]+|[ \t]+$/g, '');
}

function isJsonType(value: string): boolean {
  const semicolon = value.indexOf(';');
  return (semicolon < 0 ? value : value.slice(0, semicolon)).trim().toLowerCase() === 'application/json';
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** The bytes of a parseable request. */
function wire(p: Parsed, random: Random): Buffer {
  const lines = [`${p.method} ${p.target} HTTP/1.1`, ...p.headers.map(([n, v]) => `${n}:${v}`)];
  let body = p.body;
  if (p.declared !== undefined) {
    lines.push(`Content-Length: ${p.declared}`);
    body = Buffer.alloc(0);
  } else if (p.chunked) {
    lines.push(`${random.pick(['Transfer-Encoding', 'transfer-encoding', 'TRANSFER-ENCODING'])}: ${random.pick(['chunked', 'Chunked', 'CHUNKED'])}`);
    const parts: Buffer[] = [];
    for (let at = 0; at < p.body.length; ) {
      const size = Math.min(p.body.length - at, 1 + random.int(random.chance(0.5) ? 16 : 4096));
      const hex = size.toString(16);
      parts.push(Buffer.from(`${random.chance(0.2) ? '00' : ''}${random.chance(0.5) ? hex : hex.toUpperCase()}\r\n`, 'latin1'), p.body.subarray(at, at + size), Buffer.from('\r\n'));
      at += size;
    }
    parts.push(Buffer.from('0\r\n\r\n'));
    body = Buffer.concat(parts);
  } else if (p.method === 'POST' || p.body.length > 0 || random.chance(0.3)) {
    lines.push(`${random.pick(['Content-Length', 'content-length', 'CONTENT-LENGTH'])}: ${random.chance(0.1) ? '000' : ''}${p.body.length}`);
  }
  return Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), body]);
}

/**
 * The answers docs/API.md requires for a parseable request, in the order
 * src/server/api.ts checks: path and method, authentication (401/403 with
 * the per-address window, or 429 once the address used it up), the declared
 * and actual body size (413, the body passed over), the content type (415),
 * UTF-8 and JSON (400), then the fields.
 */
function answersFor(p: Parsed, ctx: FuzzContext): Answer[] {
  const path = p.target.split('?')[0]!;
  const head = p.method === 'HEAD';
  const plain = (status: number, body: string, headers: Record<string, string> = {}): Answer[] => [
    { status, body: head ? '' : body, headers: { 'content-type': JSON_TYPE, ...headers } },
  ];
  const keyed = path === '/v1/check' || path === '/v1/check/batch';
  if (keyed && p.method !== 'POST') return plain(405, errorText('method_not_allowed', { allowed: ['POST'] }), { allow: 'POST' });
  if (path === '/v1/health' || path === '/v1/openapi.json') {
    if (p.method !== 'GET' && p.method !== 'HEAD') return plain(405, errorText('method_not_allowed', { allowed: ['GET', 'HEAD'] }), { allow: 'GET, HEAD' });
    return plain(200, path === '/v1/health' ? '{"status":"healthy"}' : ctx.openapi);
  }
  if (!keyed) return plain(404, errorText('not_found'));

  const limited: Answer = {
    status: 429,
    body: JSON.stringify({ error: 'rate_limit_exceeded', message: 'Per-second request limit exceeded', details: {}, retry_after: 1 }),
    headers: { 'content-type': JSON_TYPE, 'x-ratelimit-limit': String(ctx.unkeyedPerSecond), 'x-ratelimit-remaining': '0', 'retry-after': '1' },
  };
  const match = /^bearer +([A-Za-z0-9_-]{16,256})$/i.exec(first(p.headers, 'authorization'));
  const key = match?.[1];
  if (key === undefined || key === ctx.keys.revoked || (key !== ctx.keys.valid && key !== ctx.keys.suspended && key !== ctx.keys.elsewhere)) {
    const refused = { status: 401, body: errorText('unauthorized'), headers: { 'content-type': JSON_TYPE, 'x-ratelimit-limit': String(ctx.unkeyedPerSecond) } };
    return [refused, limited];
  }
  if (key !== ctx.keys.valid) {
    const refused = { status: 403, body: errorText('forbidden'), headers: { 'content-type': JSON_TYPE, 'x-ratelimit-limit': String(ctx.unkeyedPerSecond) } };
    return [refused, limited];
  }
  const window = { 'content-type': JSON_TYPE, 'x-ratelimit-limit': String(ctx.keys.validLimit) };
  const answer = (status: number, body: string) => [{ status, body, headers: window }];
  const max = path === '/v1/check' ? MAX_CHECK_BODY : MAX_BATCH_BODY;
  const declared = p.declared ?? (p.chunked ? null : p.body.length);
  if ((declared !== null && declared > max) || p.body.length > max) return answer(413, errorText('payload_too_large', { max_bytes: max }));
  if (!isJsonType(first(p.headers, 'content-type'))) return answer(415, errorText('unsupported_media_type'));
  let text: string;
  try {
    text = utf8.decode(p.body);
  } catch {
    return answer(400, errorText('invalid_json', { reason: 'the body is not UTF-8' }));
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return answer(400, errorText('invalid_json'));
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return answer(400, errorText('invalid_json'));
  const fields = body as Record<string, unknown>;
  if (path === '/v1/check') {
    if (fields.ip === undefined || fields.ip === null) return answer(400, errorText('missing_ip'));
    const result = ctx.reference.lookupJson(fields.ip);
    return result === null ? answer(400, errorText('invalid_ip', { ip: inputAsText(fields.ip) })) : answer(200, result);
  }
  const ips = fields.ips;
  if (!Array.isArray(ips) || ips.length === 0 || ips.length > MAX_BATCH) return answer(400, errorText('invalid_batch', { max: MAX_BATCH }));
  return answer(200, `{"results":[${ctx.reference.lookupManyJson(ips).join(',')}]}`);
}

/** A random JSON value, `depth` levels at most. */
function randomJson(random: Random, depth: number, ctx: FuzzContext): unknown {
  switch (random.int(depth > 0 ? 9 : 6)) {
    case 0:
      return null;
    case 1:
      return random.chance(0.5);
    case 2:
      return random.pick([0, -0, 1, -1, 8, 2 ** 32, 2 ** 53 + 1, 1e308, 5e-324, 3.14, -2.5e-7, 134744072]);
    case 3:
      return random.pick(ctx.addresses);
    case 4:
      return randomAddress(random);
    case 5:
      return random.text(random.int(20), `${PRINTABLE}\u00e9\u4e2d\u{1f600}\u0000\ud800`);
    case 6:
    case 7:
      return Array.from({ length: random.int(6) }, () => randomJson(random, depth - 1, ctx));
    default: {
      const o: Record<string, unknown> = {};
      for (let i = random.int(6); i > 0; i--) o[random.pick(['ip', 'ips', 'IP', '__proto__', 'constructor', random.text(3, TOKEN)])] = randomJson(random, depth - 1, ctx);
      return o;
    }
  }
}

function randomAddress(random: Random): string {
  return random.chance(0.5) ? random.pick(ADDRESS_FORMS) : random.text(random.int(45), ADDRESS_CHARS);
}

/** `json` with 1 to 4 byte-level changes: flips, deletions, insertions, repeats. */
function mutate(json: Buffer, random: Random): Buffer {
  let b = Buffer.from(json);
  for (let n = 1 + random.int(4); n > 0; n--) {
    const at = random.int(b.length + 1);
    switch (random.int(5)) {
      case 0:
        if (b.length > 0) b[at % b.length] = random.int(256);
        break;
      case 1:
        b = Buffer.concat([b.subarray(0, at), b.subarray(at + 1 + random.int(4))]);
        break;
      case 2:
        b = Buffer.concat([b.subarray(0, at), Buffer.from(random.pick(['{', '}', '[', ']', '"', ',', ':', '\\', 'null', '"ip"', '\u00ff', '\\u0000', '\ud800'])), b.subarray(at)]);
        break;
      case 3:
        b = Buffer.concat([b.subarray(0, at), random.bytes(1 + random.int(4)), b.subarray(at)]);
        break;
      default: {
        const from = random.int(b.length + 1);
        b = Buffer.concat([b.subarray(0, at), b.subarray(from, from + random.int(16)), b.subarray(at)]);
      }
    }
  }
  return b;
}

/** Authorization values: the valid key in odd but accepted forms, and every way to get it wrong. */
function authorization(random: Random, keys: FuzzKeys): string | null {
  const k = keys.valid;
  return random.pick([
    `Bearer ${k}`, `Bearer ${k}`, `Bearer ${k}`, `bearer ${k}`, `BEARER ${k}`, `Bearer   ${k}`, ` Bearer ${k} `, `\tBearer ${k}\t`,
    `Bearer\t${k}`, `Bearer ${k} x`, `Bearer ${k}!`, `Bearer ${k.slice(0, -1)}`, `Bearer ${k}A`, `Basic ${k}`, k, `Bearer`, '',
    `Bearer ${keys.revoked}`, `Bearer ${keys.suspended}`, `Bearer ${keys.elsewhere}`, `Bearer ipr_${'A'.repeat(43)}`,
    `Bearer ${'x'.repeat(300)}`, `Bearer ${random.text(20, PRINTABLE)}`, null,
  ]);
}

function contentType(random: Random): string | null {
  return random.pick([
    'application/json', 'application/json', 'application/json', 'application/json; charset=utf-8', 'Application/JSON',
    'application/json;', ' application/json ', 'application/json ; charset=latin1', 'application/jsonx', 'application/json-patch+json',
    'text/json', 'text/plain', 'application/x-www-form-urlencoded', 'application/json, text/plain', '', null,
  ]);
}

/**
 * Extra headers of token names and printable (or high-byte) values: `room`
 * lines and 2,500 bytes at most, so that the whole header block stays under
 * uWS's 4 KiB (see brokenFraming).
 */
function junkHeaders(random: Random, room: number): [string, string][] {
  const out: [string, string][] = [];
  let bytes = 0;
  for (let n = random.int(room + 1); n > 0; n--) {
    const value = random.chance(0.05) ? random.text(random.int(2000), PRINTABLE) : random.text(random.int(40), `${PRINTABLE}\t\u00e9\u00ff\u007f`);
    const name = random.text(1 + random.int(20), TOKEN);
    bytes += name.length + value.length + 4;
    if (bytes > 2500) break;
    out.push([name, value]);
  }
  return out;
}

function shuffle<T>(random: Random, items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = random.int(i + 1);
    [items[i], items[j]] = [items[j]!, items[i]!];
  }
  return items;
}

/** A header line's name in another case, and its value with spaces or tabs around it. */
function oddly(random: Random, [name, value]: [string, string]): [string, string] {
  const n = random.chance(0.3) ? [...name].map((c) => (random.chance(0.5) ? c.toUpperCase() : c.toLowerCase())).join('') : name;
  const v = random.chance(0.2) ? `${random.pick(['', '  ', '\t'])}${value}${random.pick(['', ' ', '\t '])}` : ` ${value}`;
  return [n, v];
}

/** A parseable request to /v1/check or /v1/check/batch with the given JSON body bytes. */
function keyedRequest(random: Random, ctx: FuzzContext, path: string, body: Buffer, odd: boolean): Parsed {
  const headers: [string, string][] = [['Host', random.pick(['localhost', 'x', '127.0.0.1:8080', ''])]];
  const auth = odd ? authorization(random, ctx.keys) : `Bearer ${ctx.keys.valid}`;
  if (auth !== null) headers.push(['Authorization', auth]);
  const type = odd ? contentType(random) : 'application/json';
  if (type !== null) headers.push(['Content-Type', type]);
  if (odd && random.chance(0.3)) headers.push(['Authorization', authorization(random, ctx.keys) ?? 'Bearer nope']);
  if (odd && random.chance(0.2)) headers.push(['Content-Type', contentType(random) ?? 'text/plain']);
  if (odd) headers.push(...junkHeaders(random, 30));
  const query = random.chance(0.05) ? `?${random.text(random.int(30), TOKEN + '=&%.')}` : '';
  return {
    method: 'POST',
    target: `${path}${query}`,
    headers: odd ? shuffle(random, headers.map((h) => oddly(random, h))) : headers,
    body,
    chunked: random.chance(odd ? 0.2 : 0.05),
  };
}

const PATHS = ['/v1/check', '/v1/check/batch', '/v1/health', '/v1/openapi.json'];
const METHODS = ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD', 'TRACE'];

/** Requests whose framing uWS does not parse; after valid ones, sometimes (those are answered). */
function brokenFraming(random: Random, ctx: FuzzContext): Buffer {
  const valid = `POST /v1/check HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${ctx.keys.valid}\r\nContent-Type: application/json\r\n`;
  const body = `{"ip":"${random.pick(ctx.addresses)}"}`;
  const many = Array.from({ length: 49 + random.int(100) }, (_, i) => `X-H${i}: v`).join('\r\n');
  const broken = random.pick([
    () => random.bytes(1 + random.int(200)),
    () => `${random.text(1 + random.int(60), PRINTABLE)}\r\n\r\n`,
    () => `GET /v1/health HTTP/1.0\r\n\r\n`,
    () => `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`,
    () => `get /v1/health HTTP/1.1\r\nHost: x\r\n\r\n`,
    () => `${random.text(1 + random.int(10), 'ABCDEFGHIJKLMNOPQRSTUVWXYZ')} /v1/health HTTP/1.1\r\nHost: x\r\n\r\n`,
    () => `GET /v1/health HTTP/1.1\r\n\r\n`,
    () => `GET /v1/health HTTP/1.2\r\nHost: x\r\n\r\n`,
    () => `GET  /v1/health HTTP/1.1\r\nHost: x\r\n\r\n`,
    () => `GET v1/health HTTP/1.1\r\nHost: x\r\n\r\n`,
    () => `GET /v1/he\x01alth HTTP/1.1\r\nHost: x\r\n\r\n`,
    () => `GET /v1/health HTTP/1.1\nHost: x\n\n`,
    () => `GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n  b\r\n\r\n`,
    () => `GET /v1/health HTTP/1.1\r\nHost: x\r\nNo-Colon\r\n\r\n`,
    () => `GET /v1/health HTTP/1.1\r\nHost: x\r\nX_Under: 1\r\n\r\n`,
    () => `GET /v1/health HTTP/1.1\r\nHost: x\r\n: empty name\r\n\r\n`,
    () => `GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Ctl: a\x01b\r\n\r\n`,
    () => `GET /v1/health HTTP/1.1\r\nHost: x\r\n${many}\r\n\r\n`,
    // uWS keeps at most 4 KiB of a header block that has not arrived whole:
    // a bigger one is answered only when one read brings all of it.
    () => `GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: ${'b'.repeat(4096 + random.int(200_000))}\r\n\r\n`,
    () => `${valid}Content-Length: ${random.pick(['-1', 'abc', '0x10', '1 6', '+16', '2147483648', '99999999999999999999', ''])}\r\n\r\n${body}`,
    () => `${valid}Content-Length: ${body.length}\r\nContent-Length: ${body.length - 3}\r\n\r\n${body}`,
    () => `${valid}Content-Length: 3\r\n\r\n${body}`,
    () => `${valid}Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`,
    () => `${valid}Transfer-Encoding: identity\r\n\r\n${body}`,
    () => `${valid}Transfer-Encoding: chunked\r\n\r\n${random.pick(['zz', '-1', 'fffffffffffffffff', '10;ext=1', ''])}\r\n${body}\r\n0\r\n\r\n`,
    () => `${valid}Transfer-Encoding: chunked\r\n\r\n${(body.length + 5).toString(16)}\r\n${body}\r\n0\r\n\r\n`,
    () => `${valid}Transfer-Encoding: chunked\r\n\r\n${body.length.toString(16)}\r\n${body}`,
    () => `${valid}Transfer-Encoding: chunked\r\n\r\n${body.length.toString(16)}\r\n${body}XX0\r\n\r\n`,
  ])();
  const bytes = typeof broken === 'string' ? Buffer.from(broken, 'latin1') : broken;
  return bytes;
}

/**
 * The next hostile request. About 97% parse (answered exactly as the model
 * says), 3% break the framing.
 */
export function hostileRequest(random: Random, ctx: FuzzContext): Hostile {
  const roll = random.int(1000);
  let kind: string;
  let p: Parsed;
  if (roll < 30) {
    return { kind: 'broken framing', bytes: brokenFraming(random, ctx), answers: null, head: false, ends: true };
  } else if (roll < 230) {
    kind = 'valid check';
    p = keyedRequest(random, ctx, '/v1/check', Buffer.from(JSON.stringify({ ip: random.pick(ctx.addresses) })), false);
  } else if (roll < 260) {
    kind = 'valid batch';
    const ips = Array.from({ length: 1 + random.int(50) }, () => (random.chance(0.9) ? random.pick(ctx.addresses) : randomAddress(random)));
    p = keyedRequest(random, ctx, '/v1/check/batch', Buffer.from(JSON.stringify({ ips })), false);
  } else if (roll < 410) {
    kind = 'mutated JSON';
    const source = random.chance(0.8) ? { ip: random.pick(ctx.addresses) } : { ips: [random.pick(ctx.addresses), random.pick(ctx.addresses)] };
    p = keyedRequest(random, ctx, 'ips' in source ? '/v1/check/batch' : '/v1/check', mutate(Buffer.from(JSON.stringify(source)), random), random.chance(0.2));
  } else if (roll < 510) {
    kind = 'random JSON';
    const body = random.chance(0.7) ? { ip: randomJson(random, 4, ctx) } : randomJson(random, 4, ctx);
    p = keyedRequest(random, ctx, random.chance(0.8) ? '/v1/check' : '/v1/check/batch', Buffer.from(JSON.stringify(body) ?? 'undefined'), random.chance(0.2));
  } else if (roll < 610) {
    kind = 'invalid address form';
    const body = random.chance(0.8) ? { ip: randomAddress(random) } : { ips: Array.from({ length: 1 + random.int(20) }, () => randomAddress(random)) };
    p = keyedRequest(random, ctx, 'ip' in body ? '/v1/check' : '/v1/check/batch', Buffer.from(JSON.stringify(body)), false);
  } else if (roll < 640) {
    kind = 'huge or deep body';
    const path = random.chance(0.6) ? '/v1/check' : '/v1/check/batch';
    const max = path === '/v1/check' ? MAX_CHECK_BODY : MAX_BATCH_BODY;
    const depth = random.int(max / 2 - 10);
    const shape = random.int(4);
    const body =
      shape === 0
        ? Buffer.from(`{"ip":${'['.repeat(depth)}${']'.repeat(depth)}}`)
        : shape === 1
          ? Buffer.from(`{"ips":[${'{"a":'.repeat(depth / 3)}1${'}'.repeat(depth / 3)}]}`)
          : Buffer.from(JSON.stringify({ ip: random.pick(ctx.addresses), pad: 'x'.repeat(max - 30 + random.int(60)) }));
    p = keyedRequest(random, ctx, path, body, false);
    if (shape === 3) p.declared = max + 1 + random.int(random.chance(0.5) ? 10 : 100_000_000);
  } else if (roll < 690) {
    kind = 'invalid UTF-8';
    const json = Buffer.from(JSON.stringify({ ip: random.pick(ctx.addresses), note: 'é' }));
    const at = random.int(json.length);
    p = keyedRequest(random, ctx, '/v1/check', Buffer.concat([json.subarray(0, at), Buffer.from(random.pick([[0xff], [0xc0, 0x80], [0xed, 0xa0, 0x80], [0xe2, 0x82], [0xf8, 0x88, 0x80, 0x80, 0x80], [0x80]])), json.subarray(at)]), false);
  } else if (roll < 850) {
    kind = 'odd headers';
    p = keyedRequest(random, ctx, random.chance(0.8) ? '/v1/check' : '/v1/check/batch', Buffer.from(JSON.stringify(random.chance(0.8) ? { ip: random.pick(ctx.addresses) } : { ips: [random.pick(ctx.addresses)] })), true);
  } else if (roll < 950) {
    kind = 'other paths and methods';
    const path = random.chance(0.6)
      ? random.pick(PATHS)
      : random.pick(['/', '/v1', '/v1/', '/v1/check/', '/V1/check', '//v1/check', '/v1//health', '/v1/%63heck', '/v1/check#x', '/v2/check', '/v1/health/x', `/${random.text(random.int(40), TOKEN + '/.%~')}`]);
    const method = random.pick(METHODS);
    const headers: [string, string][] = [['Host', 'x'], ...junkHeaders(random, 5)];
    if (random.chance(0.5)) headers.push(['Authorization', `Bearer ${ctx.keys.valid}`], ['Content-Type', 'application/json']);
    const body = method === 'HEAD' || method === 'GET' ? (random.chance(0.1) ? random.bytes(random.int(100)) : Buffer.alloc(0)) : Buffer.from(JSON.stringify({ ip: random.pick(ctx.addresses) }));
    p = { method, target: `${path}${random.chance(0.2) ? `?${random.text(random.int(20), TOKEN + '=&')}` : ''}`, headers, body, chunked: false };
  } else {
    kind = 'keys';
    p = keyedRequest(random, ctx, '/v1/check', Buffer.from(JSON.stringify({ ip: random.pick(ctx.addresses) })), false);
    const auth = authorization(random, ctx.keys);
    p.headers = p.headers.filter(([n]) => n !== 'Authorization');
    if (auth !== null) p.headers.push(['Authorization', auth]);
    if (random.chance(0.1)) p.headers.push(['Expect', '100-continue']);
  }
  return { kind, bytes: wire(p, random), answers: answersFor(p, ctx), head: p.method === 'HEAD', ends: p.declared !== undefined };
}
