/**
 * Enumerates the networks of a MaxMind DB file by walking its search tree
 * (MaxMind DB File Format Specification 2.0), visiting each node once.
 * mmdb-lib has no iterator, and stepping lookups through the address space
 * costs tens of seconds; its decoder still decodes the records (each distinct
 * record once: callers cache by data offset).
 *
 * IPv6 databases that also hold IPv4 keep it under ::/96 and alias
 * ::ffff:0:0/96 and 2002::/16 to the same subtree: the walk reports that
 * subtree once, as IPv4 networks, and skips the aliases.
 */
import { createRequire } from 'node:module';
import { IprError } from '../errors.js';
import type { Family } from './ranges.js';

const require = createRequire(import.meta.url);
// mmdb-lib exports only its Reader; the decoder and metadata parser are its own modules.
const { default: Decoder } = require('mmdb-lib/lib/decoder') as {
  default: new (db: Buffer, baseOffset?: number) => { decodeFast(offset: number): { value: unknown } };
};
const { parseMetadata } = require('mmdb-lib/lib/metadata') as {
  parseMetadata(db: Buffer): { nodeCount: number; recordSize: number; ipVersion: number; databaseType: string };
};

const METADATA_MARKER = Buffer.from('abcdef4d61784d696e642e636f6d', 'hex'); // \xab\xcd\xefMaxMind.com

export interface MmdbFile {
  databaseType: string;
  ipVersion: number;
  nodeCount: number;
  /** Calls `network` for every network that has data, in address order. */
  walk(network: (family: Family, address: Uint8Array, len: number, dataOffset: number) => void): void;
  /** Decodes the record at a data offset given to `walk`'s callback. */
  decode(dataOffset: number): unknown;
}

function invalid(file: string, why: string): IprError {
  return new IprError('mmdb_invalid', `MaxMind DB ${file}: ${why}`);
}

export function openMmdb(buffer: Buffer, file: string): MmdbFile {
  const markerAt = buffer.lastIndexOf(METADATA_MARKER);
  if (markerAt < 0) throw invalid(file, 'no metadata section (truncated, or not a MaxMind DB)');
  let meta: ReturnType<typeof parseMetadata>;
  try {
    meta = parseMetadata(buffer);
  } catch (error) {
    throw invalid(file, `metadata unreadable (${(error as Error).message})`);
  }
  const { nodeCount, recordSize, ipVersion } = meta;
  if (![24, 28, 32].includes(recordSize) || (ipVersion !== 4 && ipVersion !== 6) || !(nodeCount > 0)) {
    throw invalid(file, `unsupported metadata (record size ${recordSize}, IP version ${ipVersion})`);
  }
  const nodeBytes = recordSize / 4;
  const treeSize = nodeCount * nodeBytes;
  if (treeSize + 16 > markerAt) throw invalid(file, 'search tree larger than the file (truncated)');
  const b = buffer;

  const left =
    recordSize === 24
      ? (o: number) => (b[o]! << 16) | (b[o + 1]! << 8) | b[o + 2]!
      : recordSize === 28
        ? (o: number) => ((b[o + 3]! & 0xf0) << 20) | (b[o]! << 16) | (b[o + 1]! << 8) | b[o + 2]!
        : (o: number) => b.readUInt32BE(o);
  const right =
    recordSize === 24
      ? (o: number) => (b[o + 3]! << 16) | (b[o + 4]! << 8) | b[o + 5]!
      : recordSize === 28
        ? (o: number) => ((b[o + 3]! & 0x0f) << 24) | (b[o + 4]! << 16) | (b[o + 5]! << 8) | b[o + 6]!
        : (o: number) => b.readUInt32BE(o + 4);

  // The IPv4 subtree of an IPv6 database: 96 left turns from the root.
  let ipv4Start = -1;
  if (ipVersion === 6) {
    let node = 0;
    let depth = 0;
    for (; depth < 96 && node < nodeCount; depth++) node = left(node * nodeBytes);
    if (depth === 96 && node < nodeCount) ipv4Start = node;
  }
  const dataStart = treeSize + 16;
  const decoder = new Decoder(buffer, dataStart);

  return {
    databaseType: meta.databaseType,
    ipVersion,
    nodeCount,
    walk(network) {
      const path = new Uint8Array(16);
      const v4Path = path.subarray(12);
      const width = ipVersion === 6 ? 128 : 32;
      const visit = (node: number, depth: number, onZeroPath: boolean, inV4: boolean): void => {
        if (node === ipv4Start && depth > 0 && !inV4) {
          if (!(depth === 96 && onZeroPath)) return; // an alias of the IPv4 subtree
          inV4 = true;
        }
        if (depth >= width) throw invalid(file, `the tree goes deeper than ${width} bits`);
        const at = node * nodeBytes;
        const byte = depth >> 3;
        const bit = 0x80 >> (depth & 7);
        for (let side = 0; side < 2; side++) {
          const value = side === 0 ? left(at) : right(at);
          if (side === 0) path[byte]! &= ~bit;
          else path[byte]! |= bit;
          if (value < nodeCount) {
            visit(value, depth + 1, onZeroPath && side === 0, inV4);
          } else if (value > nodeCount) {
            const offset = value - nodeCount - 16 + dataStart;
            if (offset >= markerAt) throw invalid(file, 'a record points past the data section');
            if (inV4) network(4, v4Path, depth + 1 - 96, offset);
            else network(ipVersion as Family, path, depth + 1, offset);
          }
        }
      };
      visit(0, 0, true, false);
    },
    decode(offset) {
      try {
        return decoder.decodeFast(offset).value;
      } catch (error) {
        throw invalid(file, `record at byte ${offset} unreadable (${(error as Error).message})`);
      }
    },
  };
}
