/**
 * The MaxMind DB format (MaxMind DB File Format Specification 2.0): its
 * constants and node records, shared by this reader (imports) and the
 * writer of `ipr export` (mmdb-export.ts); and the reader.
 *
 * The reader enumerates the networks of a file by walking its search tree,
 * visiting each node once. mmdb-lib has no iterator, and stepping lookups
 * through the address space costs tens of seconds; its decoder still decodes
 * the records (each distinct record once: callers cache by data offset).
 *
 * IPv6 databases that also hold IPv4 keep it under ::/96 and alias
 * ::ffff:0:0/96 and 2002::/16 to the same subtree: the walk reports that
 * subtree once, as IPv4 networks, and skips the aliases.
 */
import { createRequire } from 'node:module';
import { IprError } from '../errors.js';
import type { Family } from '../address.js';

const require = createRequire(import.meta.url);
// mmdb-lib exports only its Reader; the decoder and metadata parser are its own modules.
const { default: Decoder } = require('mmdb-lib/lib/decoder') as {
  default: new (db: Buffer, baseOffset?: number) => { decodeFast(offset: number): { value: unknown } };
};
const { parseMetadata } = require('mmdb-lib/lib/metadata') as {
  parseMetadata(db: Buffer): { nodeCount: number; recordSize: number; ipVersion: number; databaseType: string };
};

/** Starts the metadata section, at the end of the file: \xab\xcd\xefMaxMind.com. */
export const METADATA_MARKER = Buffer.from('abcdef4d61784d696e642e636f6d', 'hex');
/** Zero bytes between the search tree and the data section. */
export const DATA_SECTION_SEPARATOR = 16;
/** Bits of a node's two records; a node takes recordSize / 4 bytes. */
export const RECORD_SIZES = [24, 28, 32] as const;
export type RecordSize = (typeof RECORD_SIZES)[number];
/** Depth of the IPv4 subtree (::/96) in an IPv6 tree. */
export const IPV4_SUBTREE_DEPTH = 96;
/**
 * Prefixes of an IPv6 tree whose record points at the IPv4 subtree, as
 * MaxMind's databases have them (start words most significant first, length):
 * IPv4-mapped ::ffff:0:0/96 and 6to4 2002::/16, which carries the IPv4
 * address in its next 32 bits.
 */
export const IPV4_ALIASES = [
  { start: [0, 0, 0xffff, 0], length: 96 },
  { start: [0x20020000, 0, 0, 0], length: 16 },
] as const;

/** Data field types (the specification's numbers); above 7 they take an extended type byte. */
export const DataType = {
  Pointer: 1,
  String: 2,
  Double: 3,
  Uint16: 5,
  Uint32: 6,
  Map: 7,
  Uint64: 9,
  Array: 11,
  Boolean: 14,
} as const;

/** Reads the left (side 0) or right record of the node at byte `at`. */
export function recordReader(b: Buffer, recordSize: RecordSize): (at: number, side: 0 | 1) => number {
  if (recordSize === 24) return (o, side) => (side === 0 ? (b[o]! << 16) | (b[o + 1]! << 8) | b[o + 2]! : (b[o + 3]! << 16) | (b[o + 4]! << 8) | b[o + 5]!);
  if (recordSize === 28) {
    // The middle byte holds the top four bits of both records, the left's first.
    return (o, side) =>
      side === 0
        ? ((b[o + 3]! & 0xf0) << 20) | (b[o]! << 16) | (b[o + 1]! << 8) | b[o + 2]!
        : ((b[o + 3]! & 0x0f) << 24) | (b[o + 4]! << 16) | (b[o + 5]! << 8) | b[o + 6]!;
  }
  return (o, side) => b.readUInt32BE(o + 4 * side);
}

/** Writes a node's two records at byte `at`; the inverse of recordReader. */
export function writeNode(b: Buffer, recordSize: RecordSize, at: number, left: number, right: number): void {
  if (recordSize === 32) {
    b.writeUInt32BE(left, at);
    b.writeUInt32BE(right, at + 4);
    return;
  }
  b[at] = left >>> 16;
  b[at + 1] = left >>> 8;
  b[at + 2] = left;
  let o = at + 3;
  if (recordSize === 28) b[o++] = ((left >>> 20) & 0xf0) | ((right >>> 24) & 0x0f);
  b[o] = right >>> 16;
  b[o + 1] = right >>> 8;
  b[o + 2] = right;
}

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
  if (!(RECORD_SIZES as readonly number[]).includes(recordSize) || (ipVersion !== 4 && ipVersion !== 6) || !(nodeCount > 0)) {
    throw invalid(file, `unsupported metadata (record size ${recordSize}, IP version ${ipVersion})`);
  }
  const nodeBytes = recordSize / 4;
  const treeSize = nodeCount * nodeBytes;
  if (treeSize + DATA_SECTION_SEPARATOR > markerAt) throw invalid(file, 'search tree larger than the file (truncated)');
  const b = buffer;

  const read = recordReader(b, recordSize as RecordSize);
  const left = (o: number) => read(o, 0);
  const right = (o: number) => read(o, 1);

  // The IPv4 subtree of an IPv6 database: 96 left turns from the root.
  let ipv4Start = -1;
  if (ipVersion === 6) {
    let node = 0;
    let depth = 0;
    for (; depth < IPV4_SUBTREE_DEPTH && node < nodeCount; depth++) node = left(node * nodeBytes);
    if (depth === IPV4_SUBTREE_DEPTH && node < nodeCount) ipv4Start = node;
  }
  const dataStart = treeSize + DATA_SECTION_SEPARATOR;
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
          if (!(depth === IPV4_SUBTREE_DEPTH && onZeroPath)) return; // an alias of the IPv4 subtree
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
            const offset = value - nodeCount - DATA_SECTION_SEPARATOR + dataStart;
            if (offset >= markerAt) throw invalid(file, 'a record points past the data section');
            if (inV4) network(4, v4Path, depth + 1 - IPV4_SUBTREE_DEPTH, offset);
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
