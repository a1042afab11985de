/**
 * The public lookup API: `openSnapshot(dir)` opens the snapshot published in a
 * data folder and answers check results (src/result.ts, docs/API.md "The
 * check result").
 *
 * One call into the addon per address (or per batch of up to BATCH
 * addresses): it fills an entry of numbers in a buffer this object owns, and
 * the result is shaped here. Company and location records are decoded once
 * per snapshot, on first use, and shared: they are frozen, and two results
 * with the same location hold the same object.
 */
import { IprError, invalidIp } from './errors.js';
import { Entry, EXPORT_ENTRY_WORDS, ExportEntry, NO_RECORD, native, type NativeEvidence, type NativeSnapshotHandle } from './native.js';
import { loadRiskConfig, riskTable, type RiskConfig } from './risk.js';
import {
  FLAG_TABLES,
  resultJsonTexts,
  resultTemplate,
  type Asn,
  type CheckResult,
  type Company,
  type Evidence,
  type ExplainedResult,
  type Location,
} from './result.js';

/** An answer as an export holds it: a check result without `ip`, its ASN without `route`. */
export type Answer = Omit<CheckResult, 'ip' | 'asn'> & { asn: Omit<Asn, 'route'> | null };

/**
 * A batch of the answer space ({@link Snapshot.answerSpace}): `count`
 * prefixes, prefix i in words [i * EXPORT_ENTRY_WORDS, ...) of `entries`,
 * laid out as {@link ExportEntry} says (family, length, start, answer id).
 * `answers` are the answers first seen in this batch, whose ids follow those
 * of the batches before.
 */
export interface PrefixBatch {
  count: number;
  entries: Uint32Array;
  answers: Answer[];
}

export { EXPORT_ENTRY_WORDS, ExportEntry };

/** What lookupMany answers for an entry that is not an address (the error body, docs/API.md "Errors"). */
export interface LookupError {
  error: 'invalid_ip';
  message: string;
  details: { ip: string };
}

export interface SourceInfo {
  name: string;
  kind: string;
  format: string;
  location: string;
  records: number;
  bad_lines: number;
  [key: string]: unknown;
}

export interface SnapshotInfo {
  /** The snapshot file answering now. */
  path: string;
  format_version: number;
  built_at: string;
  file_bytes: number;
  checksum: string;
  /** The build's own description: sources with their record counts, tables, timings. */
  meta: { sources: SourceInfo[]; [key: string]: unknown };
}

export interface OpenOptions {
  /**
   * Poll the data folder for a newly published snapshot every `watch`
   * milliseconds (true: 250) and move to it without blocking lookups.
   * Off by default; `refresh()` moves on demand.
   */
  watch?: boolean | number;
  /**
   * Called when a newly published snapshot could not be opened (the current
   * one keeps answering), or with code `snapshot_damaged` when the file being
   * served was written to in place and no longer matches its checksum.
   */
  onRefreshError?: (error: IprError) => void;
  /** Called when watching moved to a newly published snapshot. */
  onSwap?: () => void;
  /** Risk weights and thresholds: a file path or the object itself (default config/risk.json). */
  risk?: string | RiskConfig;
}

const { headerBytes, entryBytes, entryTextOffset, batchCapacity: BATCH } = native.layout;
/** Room for a batch of check results as JSON: each is a few hundred bytes at most. */
const JSON_BYTES = 1 << 20;
/** Lengths up to which views of the JSON buffer are kept: one check result fits. */
const JSON_VIEWS = 4096;
/** Prefixes per batch of answerSpace. */
const EXPORT_BATCH = 16_384;

/**
 * A mapped record table: JSON texts (ASCII, non-ASCII escaped), each read
 * from the map and decoded on first use, then kept for the snapshot's life.
 */
class RecordTable<T> {
  readonly #bytes: Buffer;
  readonly #base: number;
  readonly #decoded: (T | undefined)[];
  readonly #texts: (string | undefined)[];

  constructor(table: ArrayBuffer) {
    this.#bytes = Buffer.from(table);
    const count = this.#bytes.readUInt32LE(4);
    this.#base = 8 + 4 * (count + 1);
    // Filled, not `new Array(count)`: V8 keeps arrays made that way with more
    // than 100k elements in dictionary mode, a hash lookup per access.
    this.#decoded = Array.from({ length: count }, () => undefined);
    this.#texts = Array.from({ length: count }, () => undefined);
  }

  /** The record's JSON text. */
  text(id: number): string {
    let text = this.#texts[id];
    if (text === undefined) {
      const at = 8 + 4 * id;
      text = this.#bytes.toString('latin1', this.#base + this.#bytes.readUInt32LE(at), this.#base + this.#bytes.readUInt32LE(at + 4));
      this.#texts[id] = text;
    }
    return text;
  }

  /** The record decoded, frozen and shared. */
  get(id: number): T {
    let value = this.#decoded[id];
    if (value === undefined) {
      value = Object.freeze(JSON.parse(this.text(id))) as T;
      this.#decoded[id] = value;
    }
    return value;
  }
}

export class Snapshot {
  readonly #handle: NativeSnapshotHandle;
  readonly #out: ArrayBuffer;
  readonly #words: Uint32Array;
  readonly #text: Buffer;
  /** Where the addon writes a check result as JSON. */
  readonly #json: Buffer;
  /** Views of the JSON buffer's start by length, made once: a server answers with one per request. */
  readonly #jsonViews: (Buffer | undefined)[] = Array.from({ length: JSON_VIEWS }, () => undefined);
  /** By flag bits: the result of those flags, to be copied and filled in. */
  readonly #templates: CheckResult[];
  #generation = -1;
  #companies!: RecordTable<Company>;
  #asns!: RecordTable<Omit<Asn, 'route'>>;
  #locations!: RecordTable<Location>;
  #sources!: RecordTable<string>;
  #meta: { path: string; meta: SnapshotInfo['meta'] } | undefined;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;

  /** Use {@link openSnapshot}. */
  constructor(dataDir: string, options: OpenOptions = {}) {
    const risks = riskTable(typeof options.risk === 'object' ? options.risk : loadRiskConfig(options.risk));
    this.#templates = risks.map((risk, flags) => resultTemplate(flags, risk.score, risk.recommendation));
    this.#out = new ArrayBuffer(headerBytes + entryBytes * BATCH);
    this.#words = new Uint32Array(this.#out);
    this.#text = Buffer.from(this.#out);
    const jsonOut = new ArrayBuffer(JSON_BYTES);
    this.#json = Buffer.from(jsonOut);
    this.#handle = new native.SnapshotHandle(dataDir, this.#out, jsonOut, resultJsonTexts(this.#templates));
    this.#syncRecords();
    this.info();
    if (options.watch) {
      const every = typeof options.watch === 'number' ? options.watch : 250;
      const onError = options.onRefreshError ?? (() => {});
      const onSwap = options.onSwap ?? (() => {});
      this.#timer = setInterval(() => {
        this.#handle.refresh().then((swapped) => this.#moved(swapped) && onSwap(), onError);
      }, every);
      this.#timer.unref();
    }
  }

  /**
   * The check result for one address. Throws an IprError `invalid_ip` when
   * `ip` is not an address under the strict rules of docs/API.md "Addresses".
   */
  lookup(ip: string): CheckResult {
    this.#assertOpen();
    if (typeof ip !== 'string' || this.#handle.lookup(ip) === 0) throw invalidIp(ip);
    return this.#result(ip, 0);
  }

  /**
   * The check result of one address as JSON text, exactly what
   * `JSON.stringify(lookup(ip))` means (non-ASCII characters escaped); null
   * when `ip` is not an address.
   */
  lookupJson(ip: unknown): string | null {
    const bytes = this.lookupJsonBytes(ip);
    return bytes === null ? null : this.#json.toString('latin1', 0, bytes.length);
  }

  /**
   * The same JSON as bytes (ASCII), written by the addon without making a
   * string: for servers. The view is valid until the next call on this
   * snapshot; copy it (a socket write does) before calling again.
   */
  lookupJsonBytes(ip: unknown): Uint8Array | null {
    this.#assertOpen();
    return this.#jsonView(this.#handle.lookupJson(ip));
  }

  /**
   * The check result of the address in a request body of the usual form
   * {"ip":"<address>"}, as JSON bytes (valid until the next call on this
   * snapshot); null for any other body, to be read the general way.
   */
  lookupBodyBytes(body: Uint8Array): Uint8Array | null {
    this.#assertOpen();
    return this.#jsonView(this.#handle.lookupBody(body));
  }

  /** The JSON buffer's first `length` bytes; null for 0 (not an address). */
  #jsonView(length: number): Buffer | null {
    if (length === 0) return null;
    if (length >= JSON_VIEWS) return this.#json.subarray(0, length);
    return (this.#jsonViews[length] ??= this.#json.subarray(0, length));
  }

  /**
   * JSON texts for many addresses, in order: a check result, or the
   * invalid_ip error object of an entry that is not an address.
   */
  lookupManyJson(ips: readonly unknown[]): string[] {
    return ips.map((ip) => this.lookupJson(ip) ?? JSON.stringify(lookupError(ip)));
  }

  /**
   * {"results":[...]} for many addresses, in order: a check result, or the
   * invalid_ip error object of an entry that is not an address. Bytes valid
   * until the next call on this snapshot when every entry is an address.
   */
  lookupBatchJsonBytes(ips: readonly unknown[]): Uint8Array {
    this.#assertOpen();
    const length = this.#handle.lookupBatchJson(ips);
    if (length === 0) return Buffer.from(`{"results":[${this.lookupManyJson(ips).join(',')}]}`);
    const invalid = this.#words[1]!;
    if (invalid === 0) return this.#json.subarray(0, length);
    // Entries that are not addresses: their error objects go in their empty places.
    const parts: Uint8Array[] = [];
    let at = 0;
    for (let slot = 0; slot < invalid; slot++) {
      const index = this.#words[(headerBytes >> 2) + 2 * slot]!;
      const offset = this.#words[(headerBytes >> 2) + 2 * slot + 1]!;
      parts.push(this.#json.subarray(at, offset), Buffer.from(JSON.stringify(lookupError(ips[index]))));
      at = offset;
    }
    parts.push(this.#json.subarray(at, length));
    return Buffer.concat(parts);
  }

  /**
   * Check results for many addresses, in order; an entry that is not an
   * address answers a LookupError in its place instead of failing the batch.
   */
  lookupMany(ips: readonly unknown[]): (CheckResult | LookupError)[] {
    this.#assertOpen();
    if (!Array.isArray(ips)) throw new IprError('invalid_argument', 'lookupMany takes an array of addresses');
    const results: (CheckResult | LookupError)[] = new Array(ips.length);
    for (let from = 0; from < ips.length; from += BATCH) {
      const count = this.#handle.lookupBatch(ips, from, Math.min(BATCH, ips.length - from));
      for (let i = 0; i < count; i++) {
        const input = ips[from + i];
        results[from + i] =
          this.#words[(headerBytes + entryBytes * i) >> 2] === 0 ? lookupError(input) : this.#result(input as string, i);
      }
    }
    return results;
  }

  /**
   * The whole answer space, for exports (`ipr export`): the fewest prefixes
   * that cover every address, IPv4 then IPv6, each family in address order,
   * with the id of the answer a lookup there gives (equal answers share an
   * id, numbered from 0 in the order they first appear). `onBatch` receives
   * them in batches whose arrays are valid only during the call.
   */
  answerSpace(onBatch: (batch: PrefixBatch) => void): void {
    this.#assertOpen();
    const entries = new Uint32Array(EXPORT_ENTRY_WORDS * EXPORT_BATCH);
    let known = 0;
    this.#handle.exportPrefixes(entries.buffer, (count) => {
      if (this.#words[0] !== this.#generation) this.#syncRecords(); // the handle moved to a newer snapshot
      const answers: Answer[] = [];
      for (let e = 0; e < count * EXPORT_ENTRY_WORDS; e += EXPORT_ENTRY_WORDS) {
        if (entries[e + ExportEntry.Answer] !== known) continue;
        answers.push(this.#answer(entries[e + ExportEntry.Flags]!, entries[e + ExportEntry.Company]!, entries[e + ExportEntry.Asn]!, entries[e + ExportEntry.Location]!));
        known++;
      }
      onBatch({ count, entries, answers });
    });
  }

  /**
   * The check result of one address with its evidence: which sources list
   * it (the prefix each lists), in the tables whose flag it carries. Not on
   * the lookup path (it searches the snapshot's evidence and allocates).
   * Throws an IprError `invalid_ip` when `ip` is not an address.
   */
  explain(ip: string): ExplainedResult {
    this.#assertOpen();
    const explained = typeof ip === 'string' ? this.#handle.explain(ip) : null;
    if (explained === null) throw invalidIp(ip);
    const result = this.#result(ip, 0);
    return { ...result, evidence: this.#evidence(explained.evidence, result) };
  }

  /**
   * explain() as JSON text: the check result exactly as lookupJson writes it,
   * then `"evidence"` before its closing brace; null when `ip` is not an address.
   */
  explainJson(ip: unknown): string | null {
    this.#assertOpen();
    const explained = this.#handle.explain(ip);
    if (explained === null) return null;
    const result = this.#result(ip as string, 0);
    const evidence = JSON.stringify(this.#evidence(explained.evidence, result));
    return `${this.#json.toString('latin1', 0, explained.json - 1)},"evidence":${evidence}}`;
  }

  #evidence(raw: NativeEvidence[], result: CheckResult): Evidence[] {
    return raw.map((e) => ({
      table: FLAG_TABLES[e.table]!,
      source: this.#sources.get(e.source),
      prefix: e.prefix,
      ...(e.byAsn && result.asn !== null ? { asn: result.asn.number } : {}),
    }));
  }

  /** The snapshot answering now: its file, build time, checksum and the build's metadata. */
  info(): SnapshotInfo {
    this.#assertOpen();
    const raw = this.#handle.info();
    // The metadata was verified (checksum) when the snapshot opened: parse it
    // once per snapshot. Read again from the map each time, it would follow
    // whatever was written over the file in place since.
    if (this.#meta?.path !== raw.path) this.#meta = { path: raw.path, meta: JSON.parse(raw.meta) };
    return {
      path: raw.path,
      format_version: raw.formatVersion,
      built_at: new Date(raw.builtAtMs).toISOString(),
      file_bytes: raw.fileBytes,
      checksum: raw.checksum.toString(16).padStart(16, '0'),
      meta: this.#meta.meta,
    };
  }

  /**
   * Moves to the snapshot published now, if it is newer; resolves true when
   * it did. Lookups keep answering from the old one until the swap.
   */
  async refresh(): Promise<boolean> {
    this.#assertOpen();
    return this.#moved(await this.#handle.refresh());
  }

  /**
   * After a swap, this handle lets go of the old snapshot at once (its
   * records too), even if it never looks anything up again: the old file is
   * unmapped when its last reader has moved on.
   */
  #moved(swapped: boolean): boolean {
    if (swapped && !this.#closed) {
      this.#syncRecords();
      this.info();
    }
    return swapped;
  }

  /** Releases this handle; the mapping closes when no handle in the process uses it. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#timer) clearInterval(this.#timer);
    this.#handle.close();
  }

  #assertOpen(): void {
    if (this.#closed) throw new IprError('snapshot_closed');
  }

  #syncRecords(): void {
    const [companies, asns, locations, sources] = this.#handle.records();
    this.#companies = new RecordTable(companies);
    this.#asns = new RecordTable(asns);
    this.#locations = new RecordTable(locations);
    this.#sources = new RecordTable(sources);
    this.#generation = this.#words[0]!;
  }

  /** An answer for exports: the check result without `ip`, its ASN without `route`. */
  #answer(flags: number, company: number, asnId: number, location: number): Answer {
    const { ip: _ip, asn, ...answer } = this.#shape('', flags, company, asnId, location, '');
    return { ...answer, asn: asn === null ? null : { number: asn.number, name: asn.name } };
  }

  #result(input: string, entry: number): CheckResult {
    if (this.#words[0] !== this.#generation) this.#syncRecords();
    const w = (headerBytes + entryBytes * entry) >> 2;
    const words = this.#words;
    const ipLength = words[w + Entry.IpTextLength]!;
    const textAt = headerBytes + entryBytes * entry + entryTextOffset;
    const routeAt = textAt + ipLength;
    return this.#shape(
      ipLength === 0 ? input : this.#text.toString('latin1', textAt, textAt + ipLength),
      words[w + Entry.Flags]!,
      words[w + Entry.Company]!,
      words[w + Entry.Asn]!,
      words[w + Entry.Location]!,
      this.#text.toString('latin1', routeAt, routeAt + words[w + Entry.RouteTextLength]!),
    );
  }

  /** The check result of an entry's numbers; `route` is the text of the ASN's route. */
  #shape(ip: string, flags: number, company: number, asn: number, location: number, route: string): CheckResult {
    // A copy of the template keeps the definition's field order, and every
    // result the same hidden class.
    const result = { ...this.#templates[flags]! };
    result.ip = ip;
    if (company !== NO_RECORD) result.company = this.#companies.get(company);
    if (location !== NO_RECORD) result.location = this.#locations.get(location);
    if (asn !== NO_RECORD) {
      const record = this.#asns.get(asn);
      // A literal, not a spread of the frozen record (ten times slower); its
      // field order is held to ASN_FIELDS by test/result.test.ts.
      result.asn = { number: record.number, name: record.name, route };
    }
    return result;
  }
}

function lookupError(input: unknown): LookupError {
  const error = invalidIp(input);
  return { error: 'invalid_ip', message: error.message, details: { ip: error.details.ip as string } };
}

/**
 * Opens the snapshot currently published in `dataDir` (an `ipr build --data`
 * folder). Every handle of the process on the same folder, in any worker
 * thread, shares one memory mapping. Throws an IprError `snapshot_missing`,
 * `snapshot_invalid` or `snapshot_version` naming the file.
 */
export function openSnapshot(dataDir: string, options?: OpenOptions): Snapshot {
  return new Snapshot(dataDir, options);
}

/** The canonical text of an address (RFC 5952 for IPv6), or null when it is not one. */
export function canonicalAddress(text: unknown): string | null {
  return native.canonicalAddress(text);
}
