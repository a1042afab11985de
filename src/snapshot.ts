/**
 * The public lookup API: `openSnapshot(dir)` opens the snapshot published in a
 * data folder and answers check results (interface-spec.md 2.1).
 *
 * One call into the addon per address (or per batch of up to BATCH
 * addresses): it fills an entry of numbers in a buffer this object owns, and
 * the result is shaped here. Company and location records are decoded once
 * per snapshot, on first use, and shared: they are frozen, and two results
 * with the same location hold the same object.
 */
import { IprError, invalidIp } from './errors.js';
import { Entry, NO_RECORD, native, type NativeEvidence, type NativeSnapshotHandle } from './native.js';
import { FLAG, loadRiskConfig, riskTable, type Recommendation, type Risk, type RiskConfig } from './risk.js';

export type CompanyType = 'hosting' | 'isp' | 'business' | 'education' | 'government' | 'vpn';

export interface Company {
  name: string;
  type: CompanyType;
  domain: string | null;
}

export interface Location {
  /** ISO 3166-1 alpha-2 code. */
  country: string | null;
  country_name: string | null;
  city: string | null;
  region: string | null;
  /** Decimal degrees, rounded to 4 places (about 11 m). */
  latitude: number | null;
  longitude: number | null;
}

export interface Asn {
  number: number;
  name: string | null;
  /** The most specific prefix of the ASN table that contains the address, in CIDR. */
  route: string;
}

/** A check result, field for field and in the order of interface-spec.md 2.1. */
export interface CheckResult {
  ip: string;
  is_vpn: boolean;
  is_proxy: boolean;
  is_tor: boolean;
  is_relay: boolean;
  is_hosting: boolean;
  risk_score: number;
  recommendation: Recommendation;
  company: Company | null;
  location: Location | null;
  asn: Asn | null;
}

/** The flag tables, by their native ids (evidence names them). */
const FLAG_TABLES = ['tor', 'vpn', 'proxy', 'relay', 'hosting'] as const;

/** One source listing an address (README "What the answers mean": evidence). */
export interface Evidence {
  /** The flag it sets. */
  table: (typeof FLAG_TABLES)[number];
  /** The source's name in the sources configuration the snapshot was built from. */
  source: string;
  /** The listed prefix holding the address; for an ASN list, the ASN's route. */
  prefix: string;
  /** For an ASN list: the ASN it names. */
  asn?: number;
}

/** A check result with the evidence behind its flags, after the documented fields. */
export interface ExplainedResult extends CheckResult {
  evidence: Evidence[];
}

/** What lookupMany answers for an entry that is not an address (the error body of spec 2.3). */
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
/** Room for one check result as JSON: its record texts are a few hundred bytes at most. */
const JSON_BYTES = 64 * 1024;

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

interface AsnRecord {
  number: number;
  name: string | null;
}

export class Snapshot {
  readonly #handle: NativeSnapshotHandle;
  readonly #out: ArrayBuffer;
  readonly #words: Uint32Array;
  readonly #text: Buffer;
  /** Where the addon writes a check result as JSON. */
  readonly #json: Buffer;
  readonly #risk: Risk[];
  #generation = -1;
  #companies!: RecordTable<Company>;
  #asns!: RecordTable<AsnRecord>;
  #locations!: RecordTable<Location>;
  #sources!: RecordTable<string>;
  #meta: { path: string; meta: SnapshotInfo['meta'] } | undefined;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;

  /** Use {@link openSnapshot}. */
  constructor(dataDir: string, options: OpenOptions = {}) {
    this.#risk = riskTable(typeof options.risk === 'object' ? options.risk : loadRiskConfig(options.risk));
    // Per flag combination: the JSON text from `,"is_vpn"` to the recommendation.
    const flagsJson = this.#risk.map(
      (risk, flags) =>
        `,"is_vpn":${(flags & FLAG.vpn) !== 0},"is_proxy":${(flags & FLAG.proxy) !== 0},"is_tor":${(flags & FLAG.tor) !== 0}` +
        `,"is_relay":${(flags & FLAG.relay) !== 0},"is_hosting":${(flags & FLAG.hosting) !== 0}` +
        `,"risk_score":${risk.score},"recommendation":"${risk.recommendation}"`,
    );
    this.#out = new ArrayBuffer(headerBytes + entryBytes * BATCH);
    this.#words = new Uint32Array(this.#out);
    this.#text = Buffer.from(this.#out);
    const jsonOut = new ArrayBuffer(JSON_BYTES);
    this.#json = Buffer.from(jsonOut);
    this.#handle = new native.SnapshotHandle(dataDir, this.#out, jsonOut, flagsJson);
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
   * `ip` is not an address under decisions.md's strict rules.
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
    const length = this.#handle.lookupJson(ip);
    return length === 0 ? null : this.#json.subarray(0, length);
  }

  /**
   * JSON texts for many addresses, in order: a check result, or the
   * invalid_ip error object of an entry that is not an address.
   */
  lookupManyJson(ips: readonly unknown[]): string[] {
    return ips.map((ip) => this.lookupJson(ip) ?? JSON.stringify(lookupError(ip)));
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

  #result(input: string, entry: number): CheckResult {
    if (this.#words[0] !== this.#generation) this.#syncRecords();
    const w = (headerBytes + entryBytes * entry) >> 2;
    const words = this.#words;
    const flags = words[w + Entry.Flags]!;
    const ipLength = words[w + Entry.IpTextLength]!;
    const textAt = headerBytes + entryBytes * entry + entryTextOffset;
    const risk = this.#risk[flags]!;
    const company = words[w + Entry.Company]!;
    const asnId = words[w + Entry.Asn]!;
    const location = words[w + Entry.Location]!;
    let asn: Asn | null = null;
    if (asnId !== NO_RECORD) {
      const record = this.#asns.get(asnId);
      const routeAt = textAt + ipLength;
      asn = {
        number: record.number,
        name: record.name,
        route: this.#text.toString('latin1', routeAt, routeAt + words[w + Entry.RouteTextLength]!),
      };
    }
    return {
      ip: ipLength === 0 ? input : this.#text.toString('latin1', textAt, textAt + ipLength),
      is_vpn: (flags & FLAG.vpn) !== 0,
      is_proxy: (flags & FLAG.proxy) !== 0,
      is_tor: (flags & FLAG.tor) !== 0,
      is_relay: (flags & FLAG.relay) !== 0,
      is_hosting: (flags & FLAG.hosting) !== 0,
      risk_score: risk.score,
      recommendation: risk.recommendation,
      company: company === NO_RECORD ? null : this.#companies.get(company),
      location: location === NO_RECORD ? null : this.#locations.get(location),
      asn,
    };
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
