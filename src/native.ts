/**
 * Loads the native addon (native/ built by cmake-js at `npm install`) and
 * types its surface. Only this module touches the addon object directly.
 */
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { IprError } from './errors.js';

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

/** Table ids of the native side (snapshot_format.h); the first five are flags. */
export const Table = { Tor: 0, Vpn: 1, Proxy: 2, Relay: 3, Hosting: 4, Asn: 5, Geo: 6 } as const;
export type Table = (typeof Table)[keyof typeof Table];

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
  /** Looks texts[from, from + count) up into consecutive entries; returns how many it wrote. */
  lookupBatch(texts: readonly unknown[], from: number, count: number): number;
  /**
   * The evidence of `text`'s answer (null when it is not an address); also
   * writes its entry and its JSON (`json` bytes), as lookup and lookupJson do, from the same snapshot.
   */
  explain(text: unknown): { json: number; evidence: NativeEvidence[] } | null;
  info(): NativeSnapshotInfo;
  /** The company, ASN, location and source record tables, mapped (read-only). */
  records(): [ArrayBuffer, ArrayBuffer, ArrayBuffer, ArrayBuffer];
  /** Re-reads the published pointer; resolves true when a newer snapshot was swapped in. */
  refresh(): Promise<boolean>;
  close(): void;
}

/** One source listing an address (binding.cc explain). */
export interface NativeEvidence {
  /** A flag table (Table). */
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
  add(table: Table, family: 4 | 6, starts: Uint8Array, ends: Uint8Array, values: Uint32Array, sources: Uint16Array, count: number): void;
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
  /** `flagsJson[f]`: the check result's text from `,"is_vpn"` to the recommendation for flag bits f. */
  SnapshotHandle: new (dataDir: string, out: ArrayBuffer, jsonOut: ArrayBuffer, flagsJson: string[]) => NativeSnapshotHandle;
  SnapshotWriter: new () => NativeSnapshotWriter;
  canonicalAddress(text: unknown): string | null;
  parseAddress(text: string, out: Uint8Array): 0 | 4 | 6;
  setErrorClass(cls: typeof IprError): void;
  formatVersion: number;
  layout: { headerBytes: number; entryBytes: number; entryTextOffset: number; batchCapacity: number };
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
