/**
 * The life of one request on uWebSockets.js, for every route of the server
 * (the API's and the dashboard's): one answer at most, none after the client
 * went away; the body read within a size limit; the client's address; the
 * answer written corked, HEAD-aware, closing the connection while the server
 * drains.
 *
 * uWebSockets.js lifetime rules, kept here so that routes need not know them:
 * - the HttpRequest dies when the handler's synchronous top returns: a route
 *   reads the headers it needs there, before anything waits;
 * - onAborted is registered as the exchange begins (uWS aborts the process
 *   when a response that went away is written to);
 * - a body chunk is valid only inside its onData callback: used or copied there;
 * - writes after an await are corked (send() always corks: cheap when
 *   already inside a uWS callback).
 */
import { STATUS_CODES } from 'node:http';
import ipaddr from 'ipaddr.js';
import type { HttpRequest, HttpResponse } from 'uWebSockets.js';
import { parseAddress } from '../address.js';
import { IprError } from '../errors.js';

/** What every exchange of a worker shares. */
export interface ExchangeScope {
  /** True once the server is shutting down: each answer closes its connection. */
  draining(): boolean;
  /** Requests begun and not yet answered, for a graceful shutdown. */
  inflight: { count: number };
  /**
   * The server runs behind a reverse proxy (`ipr serve --trust-proxy`): the
   * client is the last address of X-Forwarded-For, which the nearest proxy
   * wrote. Without it the header is ignored.
   */
  trustProxy: boolean;
}

export type Header = readonly [name: string, value: string];

export const JSON_TYPE = 'application/json; charset=utf-8';

const statusLines = new Map<number, string>();

/** "404 Not Found": the status line uWS writes, made once per status. */
function statusLine(status: number): string {
  let line = statusLines.get(status);
  if (line === undefined) {
    line = `${status} ${STATUS_CODES[status] ?? ''}`.trimEnd();
    statusLines.set(status, line);
  }
  return line;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * A JSON object from body bytes, or IprError `invalid_json` (the body is not
 * UTF-8, not JSON, or JSON but not an object).
 */
export function parseJsonObject(bytes: Uint8Array): Record<string, unknown> {
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw new IprError('invalid_json', undefined, { reason: 'the body is not UTF-8' });
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new IprError('invalid_json');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new IprError('invalid_json');
  return value as Record<string, unknown>;
}

function isJsonContentType(value: string): boolean {
  if (value === 'application/json') return true; // what nearly every client sends: no string made
  const semicolon = value.indexOf(';');
  return (semicolon < 0 ? value : value.slice(0, semicolon)).trim().toLowerCase() === 'application/json';
}

/** The headers a body is judged by, read in the handler's synchronous top. */
export interface BodyHeaders {
  contentType: string;
  contentLength: string;
}

/** Where a body goes: both are called inside uWS's data callback, and what they throw is theirs to catch. */
export interface BodyReader {
  /** The whole body, valid only during the call. */
  onBody(body: Uint8Array): void;
  onBodyRefused(code: 'payload_too_large' | 'unsupported_media_type', details: Record<string, unknown>): void;
}

export class Exchange {
  readonly res: HttpResponse;
  readonly scope: ExchangeScope;
  /** A HEAD request: answered as GET would be, without content. */
  readonly head: boolean;
  #done = false;
  #aborted = false;

  /**
   * Answers only from the route's synchronous top or a body callback, where
   * uWS has corked the socket already (it corks while it processes received
   * bytes): send() need not cork again.
   */
  #inCallbacksOnly: boolean;
  /** The client a trusted proxy named (X-Forwarded-For), as written; '' when none. */
  readonly #forwardedFor: string;
  #client: Uint8Array | null = null;

  /** Begins an exchange in the route's synchronous top (`req` is read here and not kept). */
  constructor(res: HttpResponse, req: HttpRequest, scope: ExchangeScope, head: boolean, inCallbacksOnly = false) {
    this.res = res;
    this.scope = scope;
    this.head = head;
    this.#inCallbacksOnly = inCallbacksOnly;
    this.#forwardedFor = scope.trustProxy ? lastOf(req.getHeader('x-forwarded-for')) : '';
    scope.inflight.count++;
    res.onAborted(() => {
      this.#aborted = true;
      if (this.#claim()) this.answered(0);
    });
  }

  /** From now on this exchange may answer after an await: send() corks. */
  leaveCallbacks(): void {
    this.#inCallbacksOnly = false;
  }

  /** Not answered yet, and the client still there. */
  get open(): boolean {
    return !this.#done;
  }

  /** The one answer: false when it was given already or the client went away. */
  #claim(): boolean {
    if (this.#done) return false;
    this.#done = true;
    this.scope.inflight.count--;
    return true;
  }

  /**
   * Called once per exchange, as its answer is decided (before it is
   * written): `status` 0 when the client went away first. For subclasses
   * that count or log answers.
   */
  protected answered(_status: number): void {}

  /** Writes the headers every answer of this kind carries, after the status line. */
  protected writeHeaders(_res: HttpResponse): void {}

  /**
   * Answers, unless answered already or aborted: the status line, this
   * kind's headers, then `headers`, then `body` (copied by uWS before this
   * returns). Without content for HEAD, and with Connection: close while the
   * server drains.
   */
  send(status: number, body: string | Uint8Array, headers: readonly Header[] | null = null): void {
    if (!this.#claim()) return;
    this.answered(status);
    if (this.#aborted) return;
    if (this.#inCallbacksOnly) this.#write(status, body, headers);
    else this.res.cork(() => this.#write(status, body, headers));
  }

  #write(status: number, body: string | Uint8Array, headers: readonly Header[] | null): void {
    const res = this.res;
    const close = this.scope.draining();
    res.writeStatus(statusLine(status));
    this.writeHeaders(res);
    if (headers !== null) for (const [name, value] of headers) res.writeHeader(name, value);
    if (this.head) endHead(res, typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength, close);
    else res.end(body, close);
  }

  /**
   * The client's address as 16 bytes, IPv4 as IPv4-mapped: the connection's
   * peer, or behind a trusted proxy the address it forwarded (when that is
   * an address, by the addon's strict parser).
   */
  clientBytes(): Uint8Array {
    if (this.#client === null) {
      const forwarded = this.#forwardedFor === '' ? null : forwardedBytes(this.#forwardedFor);
      this.#client = forwarded ?? mappedBytes(this.res.getRemoteAddress());
    }
    return this.#client;
  }

  /** The client's address as text, for logs: the forwarded one when it is an address, else what uWS reports. */
  clientText(): string {
    if (this.#forwardedFor !== '' && forwardedBytes(this.#forwardedFor) !== null) return this.#forwardedFor;
    return Buffer.from(this.res.getRemoteAddressAsText()).toString('latin1');
  }

  /**
   * Reads a JSON body of at most `maxBytes` and hands it to `reader`, or
   * refuses it: 413 `payload_too_large` as soon as the body is known to be
   * too large (from Content-Length, or once its bytes pass the limit: the
   * rest is passed over by uWS and the connection serves the next request),
   * then 415 `unsupported_media_type` when it is not declared as JSON.
   */
  readBody(headers: BodyHeaders, maxBytes: number, reader: BodyReader): void {
    // Not waiting for a body announced too large: closing the connection with
    // its bytes unread would make the kernel reset it, and the client could
    // lose this answer.
    if (headers.contentLength !== '' && Number(headers.contentLength) > maxBytes) {
      reader.onBodyRefused('payload_too_large', { max_bytes: maxBytes });
      return;
    }
    let chunks: Buffer[] | null = null;
    let size = 0;
    this.res.onData((chunk, isLast) => {
      if (this.#done) return;
      size += chunk.byteLength;
      if (size > maxBytes) {
        reader.onBodyRefused('payload_too_large', { max_bytes: maxBytes });
        return;
      }
      if (!isLast) {
        (chunks ??= []).push(Buffer.from(chunk.slice(0))); // the chunk dies with this callback: copy
        return;
      }
      if (!isJsonContentType(headers.contentType)) {
        reader.onBodyRefused('unsupported_media_type', {});
        return;
      }
      const last = new Uint8Array(chunk);
      reader.onBody(chunks === null ? last : Buffer.concat([...chunks, last]));
    });
  }
}

/**
 * Ends the answer to a HEAD request (inside a cork): the headers GET would
 * get, with the Content-Length of its content, and no content, which would
 * be read as the next answer (RFC 9110). uWS 20.30's endWithoutBody ends a
 * response only when called without arguments (given a length, it leaves
 * the response open and uWS aborts the process), so the length is written
 * as a header; a closing answer says Content-Length: 0 instead.
 */
function endHead(res: HttpResponse, length: number, close: boolean): void {
  if (close) {
    res.end('', true);
    return;
  }
  res.writeHeader('Content-Length', String(length));
  res.endWithoutBody();
}

/** The last value of a list header (what the nearest proxy wrote). */
export function lastOf(header: string): string {
  const comma = header.lastIndexOf(',');
  return (comma < 0 ? header : header.slice(comma + 1)).trim();
}

/** A forwarded address as 16 bytes (IPv4 as IPv4-mapped); null when it is not an address. */
function forwardedBytes(text: string): Uint8Array | null {
  const bytes = new Uint8Array(16);
  const family = parseAddress(text, bytes);
  if (family === 0) return null;
  if (family === 4) {
    bytes.copyWithin(12, 0, 4);
    bytes.fill(0, 0, 10);
    bytes[10] = 0xff;
    bytes[11] = 0xff;
  }
  return bytes;
}

/** An address uWS reports (4 or 16 bytes) as 16 bytes, IPv4 as IPv4-mapped. */
export function mappedBytes(raw: ArrayBuffer): Uint8Array {
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

/** 16 address bytes as an ipaddr.js address: IPv4-mapped ones as IPv4. */
export function addressOf(bytes: Uint8Array): ipaddr.IPv4 | ipaddr.IPv6 {
  const v6 = ipaddr.fromByteArray([...bytes]) as ipaddr.IPv6;
  return v6.isIPv4MappedAddress() ? v6.toIPv4Address() : v6;
}
