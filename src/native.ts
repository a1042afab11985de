/**
 * Loads the native addon (native/ built by cmake-js at `npm install`) and
 * types its surface. Only this module touches the addon object directly.
 */
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { IprError } from './errors.js';
import type { ResultJsonTexts } from './result.js';

/** Words of one lookup entry (binding.cc documents the layout). */
export const Entry = {
  Status: 0,
  Flags: 1,
  Company: 2,
  Asn: 3,
  Location: 4,
  RouteLength: 5,
  IpTextLength: 6,
  RouteTextLength: 7,
} as const;

/**
 * Words of one exportPrefixes entry (binding.cc documents the layout): the
 * family (4 or 6), the prefix length, the start address in four words (most
 * significant first; IPv4 in the first), the answer's id, then the answer's
 * flags and record ids.
 */
export const ExportEntry = {
  Family: 0,
  Length: 1,
  Start: 2,
  Answer: 6,
  Flags: 7,
  Company: 8,
  Asn: 9,
  Location: 10,
} as const;

export const RecordKind = { Company: 0, Asn: 1, Location: 2, Source: 3 } as const;
export type RecordKind = (typeof RecordKind)[keyof typeof RecordKind];

/** "No record" in an entry's record words. */
export const NO_RECORD = 0xffffffff;

export interface NativeSnapshotHandle {
  /** Looks `text` up into the buffer's first entry; returns 0 (invalid), 4 or 6. */
  lookup(text: unknown): number;
  /**
   * Writes the check result of `text` as JSON (ASCII) at the start of the
   * JSON buffer; returns its length, 0 when `text` is not an address.
   */
  lookupJson(text: unknown): number;
  /**
   * For a body of the usual form {"ip":"<address>"} (native/src/request_body.h),
   * writes the check result as JSON at the start of the JSON buffer and
   * returns its length; 0 for any other body.
   */
  lookupBody(body: Uint8Array): number;
  /**
   * Writes {"results":[...]} for every entry of `texts` at the start of the
   * JSON buffer and returns its length (0: it does not fit). An entry that
   * is not an address leaves its place empty: the out buffer's word 1 says
   * how many; (index, byte offset) pairs follow the header.
   */
  lookupBatchJson(texts: readonly unknown[]): number;
  /** Looks texts[from, from + count) up into consecutive entries; returns how many it wrote. */
  lookupBatch(texts: readonly unknown[], from: number, count: number): number;
  /**
   * The evidence of `text`'s answer (null when it is not an address); also
   * writes its entry and its JSON (`json` bytes), as lookup and lookupJson do, from the same snapshot.
   */
  explain(text: unknown): { json: number; evidence: NativeEvidence[] } | null;
  info(): NativeSnapshotInfo;
  /**
   * The answer space for exports, in batches of `layout.exportWords`-word
   * entries written into `out` (binding.cc documents them); `onBatch(count)`
   * reads each batch before it returns.
   */
  exportPrefixes(out: ArrayBuffer, onBatch: (count: number) => void): void;
  /** The company, ASN, location and source record tables, mapped (read-only). */
  records(): [ArrayBuffer, ArrayBuffer, ArrayBuffer, ArrayBuffer];
  /** Re-reads the published pointer; resolves true when a newer snapshot was swapped in. */
  refresh(): Promise<boolean>;
  close(): void;
}

/** One source listing an address (binding.cc explain). */
export interface NativeEvidence {
  /** A flag table: a TABLE_ID of src/result.ts. */
  table: number;
  /** A source record id. */
  source: number;
  /** The listed prefix holding the address; for an ASN listing, the ASN's route. */
  prefix: string;
  /** The source listed the address's ASN. */
  byAsn: boolean;
}

export interface NativeSnapshotInfo {
  path: string;
  meta: string;
  formatVersion: number;
  /** The names of the tables, in the addon's order (native/src/snapshot_format.h): src/result.ts TABLES. */
  tables: string[];
  builtAtMs: number;
  fileBytes: number;
  checksum: bigint;
  generation: number;
  trieNodes: [number, number];
  trieLeaves: [number, number];
}

export interface NativeCompileStats {
  tables: { ranges: [number, number]; prefixes: [number, number] }[];
  intervals: [number, number];
  nodes: [number, number];
  leaves: [number, number];
  trieBytes: [number, number];
}

export interface NativeSnapshotWriter {
  /** `table`: a TABLE_ID of src/result.ts; `sources[i]`: the source id of range i (evidence). */
  add(table: number, family: 4 | 6, starts: Uint8Array, ends: Uint8Array, values: Uint32Array, sources: Uint16Array, count: number): void;
  setAsnAttributes(flags: Uint8Array, companies: Uint32Array): void;
  /** Entry i: source sources[i] gives ASN record records[i] the flag of table tables[i]. */
  setAsnEvidence(records: Uint32Array, sources: Uint16Array, tables: Uint8Array): void;
  /** The ASN record each address (network order, 4 or 16 bytes each) will answer; resolves that ASN table. */
  asnRecordsOf(family: 4 | 6, addresses: Uint8Array, count: number): Uint32Array;
  /** Per ASN record id, the IPv4 addresses that answer it; resolves the IPv4 ASN table. */
  asnV4AddressCounts(): Float64Array;
  setRecords(kind: RecordKind, bytes: Uint8Array, offsets: Uint32Array): void;
  compile(): NativeCompileStats;
  write(path: string, metaJson: string, builtAtMs: number): void;
}

interface NativeAddon {
  SnapshotHandle: new (dataDir: string, out: ArrayBuffer, jsonOut: ArrayBuffer, jsonTexts: ResultJsonTexts) => NativeSnapshotHandle;
  SnapshotWriter: new () => NativeSnapshotWriter;
  canonicalAddress(text: unknown): string | null;
  parseAddress(text: string, out: Uint8Array): 0 | 4 | 6;
  setErrorClass(cls: typeof IprError): void;
  /** The shared change counter of `path` (created when absent): its first uint32, valid for the life of the process. */
  mapChangeCounter(path: string): ArrayBuffer;
  /** Adds one to a counter mapChangeCounter returned, atomically across processes; returns the new value. */
  bumpChangeCounter(counter: ArrayBuffer): number;
  /** The codes of the errors the addon throws (native/src/error_codes.h), each a key of ERROR_CODES. */
  errorCodes: string[];
  formatVersion: number;
  /** The names of the tables, in the addon's order (native/src/snapshot_format.h): src/result.ts TABLES. */
  tables: string[];
  layout: { headerBytes: number; entryBytes: number; entryTextOffset: number; batchCapacity: number; exportWords: number };
}

const addonPath = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'native', 'build', 'Release', 'ipr_native.node');

function load(): NativeAddon {
  try {
    const addon = createRequire(import.meta.url)(addonPath) as NativeAddon;
    addon.setErrorClass(IprError);
    return addon;
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new Error(
      `The native addon could not be loaded from ${addonPath} (${reason}). ` +
        'It is built by `npm install` (cmake-js, a C++17 compiler and cmake); rebuild it with `npm run build`.',
    );
  }
}

export const native = load();

/** Words of one exportPrefixes entry. */
export const EXPORT_ENTRY_WORDS = native.layout.exportWords;
