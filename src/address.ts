/**
 * Addresses and prefixes as text, read by the addon's strict parser (the
 * one lookups use) into bytes in network order: for the importers of feeds
 * and for the allowed addresses of keys alike.
 */
import { native } from './native.js';

export type Family = 4 | 6;

/** A parsed prefix: its family, its address bytes (network order) and length. */
export interface ParsedPrefix {
  family: Family;
  bytes: Uint8Array;
  len: number;
}

const scratch = new Uint8Array(16);

/** Parses an address into `out` (16 bytes); returns its family or 0. */
export function parseAddress(text: string, out: Uint8Array = scratch): 0 | Family {
  return native.parseAddress(text, out);
}

/**
 * Parses "address" or "address/len" into `out`. Host bits set below the
 * length are cleared (feeds write 1.2.3.4/24 for 1.2.3.0/24). An IPv4-mapped
 * IPv6 prefix (::ffff:a.b.c.d/len, len >= 96) becomes the IPv4 prefix.
 */
export function parsePrefix(text: string, out: Uint8Array): ParsedPrefix | null {
  const slash = text.indexOf('/');
  const address = slash < 0 ? text : text.slice(0, slash);
  const family = parseAddress(address, out);
  if (family === 0) return null;
  const width = family === 4 ? 32 : 128;
  if (slash < 0) return { family, bytes: out, len: width };
  const lenText = text.slice(slash + 1);
  if (!/^(0|[1-9][0-9]{0,2})$/.test(lenText)) return null;
  let len = Number(lenText);
  if (family === 4 && address.includes(':')) len -= 96;
  if (len < 0 || len > width) return null;
  return { family, bytes: out, len };
}

/** Writes the address of an unsigned integer (IPv4 below 2^32) into `out`; returns its family. */
export function integerAddress(text: string, out: Uint8Array): 0 | Family {
  if (!/^(0|[1-9][0-9]{0,38})$/.test(text)) return 0;
  let value = BigInt(text);
  if (value >= 1n << 128n) return 0;
  const family: Family = value < 1n << 32n ? 4 : 6;
  const width = family === 4 ? 4 : 16;
  for (let i = width - 1; i >= 0; i--) {
    out[i] = Number(value & 0xffn);
    value >>= 8n;
  }
  return family;
}

/** Compares two addresses of the same family (first `width` bytes). */
export function compareAddresses(a: Uint8Array, b: Uint8Array, width: number): number {
  for (let i = 0; i < width; i++) {
    if (a[i] !== b[i]) return a[i]! - b[i]!;
  }
  return 0;
}
