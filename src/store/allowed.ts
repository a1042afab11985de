/**
 * The source addresses a key may be used from: entries parsed by the addon's
 * strict address parser (the one lookups use, through pipeline/ranges.ts),
 * stored as canonical text, and compiled for the API into bytes that a
 * request's address is matched against with byte comparisons.
 *
 * An IPv4-mapped entry is the IPv4 entry it carries, as a client's address
 * is (a server on :: sees IPv4 clients as ::ffff:a.b.c.d):
 * `::ffff:127.0.0.1` is stored as `127.0.0.1`, `::ffff:203.0.113.0/120` as
 * `203.0.113.0/24`. A mapped prefix shorter than /96 (`::ffff:203.0.113.0/24`,
 * which as IPv6 would be ::/24 and hold ::1) is refused as ambiguous.
 */
import { IprError } from '../errors.js';
import { parsePrefix } from '../address.js';
import { canonicalAddress } from '../snapshot.js';

/** Bytes of one compiled entry: family (4 or 6), prefix length, 16 bytes of the network (an IPv4 one in the first 4). */
const ENTRY = 18;

interface Entry {
  family: 4 | 6;
  len: number;
  /** The network, host bits cleared: 4 or 16 bytes. */
  bytes: Uint8Array;
  /** Written with a length. */
  withLength: boolean;
}

function parseEntry(text: string): Entry | null {
  const trimmed = text.trim();
  const parsed = parsePrefix(trimmed, new Uint8Array(16));
  if (parsed === null) return null;
  const bytes = parsed.bytes.slice(0, parsed.family === 4 ? 4 : 16);
  for (let bit = parsed.len; bit < bytes.length * 8; bit++) bytes[bit >> 3]! &= ~(0x80 >> (bit & 7));
  return { family: parsed.family, len: parsed.len, bytes, withLength: trimmed.includes('/') };
}

function entryText(e: Entry): string {
  const address =
    e.family === 4
      ? e.bytes.join('.')
      : canonicalAddress(Array.from({ length: 8 }, (_, i) => ((e.bytes[2 * i]! << 8) | e.bytes[2 * i + 1]!).toString(16)).join(':'))!;
  return e.withLength ? `${address}/${e.len}` : address;
}

/** Validates a list of addresses or CIDR prefixes; returns them canonical (IPv4-mapped ones as IPv4, host bits cleared). */
export function normaliseAllowed(list: string[]): string[] {
  return list.map((text) => {
    const entry = parseEntry(text);
    if (entry === null) {
      const mapped = /^\s*::ffff:[0-9.]+\/[0-9]+\s*$/i.test(text) && parsePrefix(text.trim().split('/')[0]!, new Uint8Array(16)) !== null;
      const why = mapped ? ' (an IPv4-mapped prefix needs a length of 96 to 128)' : '';
      throw new IprError('invalid_argument', `not an address or CIDR prefix: ${JSON.stringify(text)}${why}`);
    }
    return entryText(entry);
  });
}

/**
 * A stored list compiled for matching. An entry that no longer parses (none
 * should) matches nothing: a key fails closed.
 */
export function compileAllowed(list: string[]): Uint8Array {
  const entries = list.map(parseEntry).filter((e): e is Entry => e !== null);
  const out = new Uint8Array(entries.length * ENTRY);
  entries.forEach((e, i) => {
    out[i * ENTRY] = e.family;
    out[i * ENTRY + 1] = e.len;
    out.set(e.bytes, i * ENTRY + 2);
  });
  return out;
}

/**
 * Whether the client at `remote` (uWS's getRemoteAddress(): 4 bytes, or 16,
 * IPv4 clients of a server on :: as IPv4-mapped) is in the compiled list.
 * Allocates nothing.
 */
export function allowedFrom(compiled: Uint8Array, remote: ArrayBuffer): boolean {
  const address = new Uint8Array(remote);
  let family: 4 | 6 = address.length === 4 ? 4 : 6;
  let from = 0;
  if (family === 6) {
    let mapped = address[10] === 0xff && address[11] === 0xff;
    for (let i = 0; i < 10 && mapped; i++) mapped = address[i] === 0;
    if (mapped) {
      family = 4;
      from = 12;
    }
  }
  for (let at = 0; at < compiled.length; at += ENTRY) {
    if (compiled[at] !== family) continue;
    const len = compiled[at + 1]!;
    const whole = len >> 3;
    let match = true;
    for (let i = 0; i < whole && match; i++) match = address[from + i] === compiled[at + 2 + i];
    if (match && (len & 7) !== 0) {
      const mask = (0xff << (8 - (len & 7))) & 0xff;
      match = (address[from + whole]! & mask) === compiled[at + 2 + whole];
    }
    if (match) return true;
  }
  return false;
}
