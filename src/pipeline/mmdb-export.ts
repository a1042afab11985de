/**
 * `ipr export --format mmdb`: the published snapshot as a MaxMind DB (format
 * 2.0), for the tools that read one (nginx's and HAProxy's GeoIP2 modules,
 * Envoy, Logstash, Suricata, the readers of every language).
 *
 * The file is an IPv6 tree holding IPv4 at ::/96, with ::ffff:0:0/96 and
 * 2002::/16 pointing at the IPv4 subtree as MaxMind's databases do (mmdb.ts
 * has the format's constants). The addon walks the snapshot's tries and hands
 * over the fewest prefixes that cover the address space, in address order,
 * each with the id of its answer ({@link Snapshot.answerSpace}); the tree is
 * built from them in one pass, a node per branching. Each distinct answer is
 * one record of the data section, and the values answers share (companies,
 * locations, ASNs, countries, map keys, strings) are written once and pointed
 * at. The file is written under a partial name, synced, then renamed.
 */
import { closeSync, fsyncSync, openSync, renameSync, rmSync, statSync, writeSync } from 'node:fs';
import path from 'node:path';
import { IprError } from '../errors.js';
import type { Company, Location } from '../result.js';
import { EXPORT_ENTRY_WORDS, ExportEntry, openSnapshot, type Answer, type Snapshot } from '../snapshot.js';
import { DataType, DATA_SECTION_SEPARATOR, IPV4_ALIASES, IPV4_SUBTREE_DEPTH, METADATA_MARKER, RECORD_SIZES, writeNode, type RecordSize } from './mmdb.js';
import { partialPath, syncDir } from './publish.js';

/**
 * The database type: the names GeoIP2 readers look for in it (their `city`,
 * `asn` and `anonymousIp` methods check that the type contains "City", "ASN"
 * or "Anonymous-IP"), after our own.
 */
export const MMDB_DATABASE_TYPE = 'IPR-Reputation-City-ASN-Anonymous-IP';

export interface ExportOptions {
  /** The data folder whose published snapshot is exported. */
  dataDir: string;
  /** The file to write (replaced atomically). */
  out: string;
}

export interface ExportSummary {
  file: string;
  /** The snapshot file exported. */
  snapshot: string;
  bytes: number;
  nodeCount: number;
  recordSize: RecordSize;
  /** Prefixes of the snapshot's answer space: IPv4, IPv6. */
  prefixes: [number, number];
  /** Distinct answers in the file, each one record of the data section. */
  answers: number;
  dataBytes: number;
  seconds: number;
}

/** A number with its MaxMind DB type: a JavaScript number alone does not say which. */
class TypedNumber {
  constructor(
    readonly type: typeof DataType.Uint16 | typeof DataType.Uint32 | typeof DataType.Uint64 | typeof DataType.Double,
    readonly value: number,
  ) {}
}

/**
 * A value answers share (a company, a location, an ASN, a country...):
 * written in full where first used, and a pointer to that everywhere after.
 * Once written it lets go of the value.
 */
class Shared {
  offset = -1;
  constructor(public value: Value | null) {}
}

type Value = string | boolean | TypedNumber | Shared | readonly Value[] | { readonly [key: string]: Value };

/** Bytes of a pointer to `offset`. */
function pointerSize(offset: number): number {
  return offset < 2048 ? 2 : offset < 526_336 ? 3 : offset < 134_744_064 ? 4 : 5;
}

/**
 * A data section being written. Strings are kept once by content (a later
 * use is a pointer to the first, when that is shorter); values answers share
 * are {@link Shared}.
 */
class DataSection {
  #bytes = Buffer.alloc(1 << 20);
  #size = 0;
  readonly #strings = new Map<string, number>();

  /** @param pointers false for the metadata, which has no pointers. */
  constructor(private readonly pointers = true) {}

  get size(): number {
    return this.#size;
  }

  bytes(): Buffer {
    return this.#bytes.subarray(0, this.#size);
  }

  /** Writes a record (a tree record points at it) and returns its offset. */
  add(record: { readonly [key: string]: Value }): number {
    const at = this.#size;
    this.#value(record);
    return at;
  }

  #value(value: Value): void {
    if (typeof value === 'string') {
      const known = this.#strings.get(value);
      // A pointer when it is shorter than the string (its UTF-8 is at least value.length bytes).
      if (known !== undefined && pointerSize(known) <= value.length) return this.#pointer(known);
      const length = Buffer.byteLength(value);
      if (this.pointers && known === undefined) this.#strings.set(value, this.#size);
      this.#control(DataType.String, length);
      this.#ensure(length);
      this.#size += this.#bytes.write(value, this.#size, 'utf8');
    } else if (typeof value === 'boolean') {
      this.#control(DataType.Boolean, value ? 1 : 0);
    } else if (value instanceof TypedNumber) {
      this.#number(value);
    } else if (value instanceof Shared) {
      if (value.offset >= 0) return this.#pointer(value.offset);
      value.offset = this.#size;
      this.#value(value.value!);
      value.value = null;
    } else if (Array.isArray(value)) {
      this.#control(DataType.Array, value.length);
      for (const item of value as readonly Value[]) this.#value(item);
    } else {
      const map = value as { readonly [key: string]: Value };
      let size = 0;
      for (const _ in map) size++;
      this.#control(DataType.Map, size);
      for (const key in map) {
        this.#value(key);
        this.#value(map[key]!);
      }
    }
  }

  #ensure(n: number): void {
    if (this.#size + n <= this.#bytes.length) return;
    const grown = Buffer.alloc(Math.max(2 * this.#bytes.length, this.#size + n));
    this.#bytes.copy(grown, 0, 0, this.#size);
    this.#bytes = grown;
  }

  /** A field's control byte, extended type byte and size bytes. */
  #control(type: number, size: number): void {
    if (size > 16_843_036) throw new IprError('export_failed', `a value of ${size} bytes or entries is more than a MaxMind DB field holds`);
    this.#ensure(5);
    const b = this.#bytes;
    let at = this.#size;
    const base = type <= 7 ? type << 5 : 0;
    const sizeBits = size < 29 ? size : size < 285 ? 29 : size < 65_821 ? 30 : 31;
    b[at++] = base | sizeBits;
    if (type > 7) b[at++] = type - 7;
    if (sizeBits === 29) {
      b[at++] = size - 29;
    } else if (sizeBits === 30) {
      b.writeUInt16BE(size - 285, at);
      at += 2;
    } else if (sizeBits === 31) {
      b.writeUIntBE(size - 65_821, at, 3);
      at += 3;
    }
    this.#size = at;
  }

  #pointer(offset: number): void {
    this.#ensure(5);
    const b = this.#bytes;
    const at = this.#size;
    const size = pointerSize(offset);
    if (size === 2) {
      b[at] = 0x20 | (offset >>> 8);
      b[at + 1] = offset & 0xff;
    } else if (size === 3) {
      const v = offset - 2048;
      b[at] = 0x28 | (v >>> 16);
      b.writeUInt16BE(v & 0xffff, at + 1);
    } else if (size === 4) {
      const v = offset - 526_336;
      b[at] = 0x30 | (v >>> 24);
      b.writeUIntBE(v & 0xffffff, at + 1, 3);
    } else {
      b[at] = 0x38;
      b.writeUInt32BE(offset, at + 1);
    }
    this.#size = at + size;
  }

  #number({ type, value }: TypedNumber): void {
    if (type === DataType.Double) {
      this.#control(type, 8);
      this.#ensure(8);
      this.#size = this.#bytes.writeDoubleBE(value, this.#size);
      return;
    }
    // Unsigned integers take as few big-endian bytes as they need (0 takes none).
    let length = 0;
    for (let v = value; v >= 1; v = Math.floor(v / 256)) length++;
    this.#control(type, length);
    this.#ensure(length);
    for (let i = length - 1, v = value; i >= 0; i--, v = Math.floor(v / 256)) this.#bytes[this.#size + i] = v % 256;
    this.#size += length;
  }
}

/** A record of the tree that holds an answer (its id in the low 31 bits) rather than a node. */
const ANSWER = 0x80000000;
const UNSET = 0xffffffff;

/** Bit `depth` of a 128-bit address in four words, most significant first. */
function bitAt(words: ArrayLike<number>, at: number, depth: number): number {
  return (words[at + (depth >>> 5)]! >>> (31 - (depth & 31))) & 1;
}

/** The first bit in which two addresses differ (128 when equal). */
function firstDifference(a: ArrayLike<number>, aAt: number, b: ArrayLike<number>, bAt: number): number {
  for (let i = 0; i < 4; i++) {
    const x = (a[aAt + i]! ^ b[bAt + i]!) >>> 0;
    if (x !== 0) return 32 * i + Math.clz32(x);
  }
  return 128;
}

/**
 * The binary search tree, built from disjoint prefixes given in address
 * order: the nodes on the last prefix's path are kept, so each prefix only
 * adds the nodes below where it leaves that path. Node 0 is the root.
 */
class SearchTree {
  #records = new Uint32Array(1 << 22).fill(UNSET);
  #nodes = 0;
  /** path[d]: the node at depth d on the last prefix's path. */
  readonly #path = new Uint32Array(128);
  readonly #last = new Uint32Array(4);
  #lastLength = 0;

  get nodeCount(): number {
    return this.#nodes;
  }

  /** Gives the prefix `length` bits from words [at, at + 4) of `start` the record `record`. */
  insert(start: ArrayLike<number>, at: number, length: number, record: number): void {
    let depth = 0;
    if (this.#nodes === 0) {
      this.#path[0] = this.#node();
    } else {
      depth = firstDifference(start, at, this.#last, 0);
      if (depth >= length || depth >= this.#lastLength) throw new Error('mmdb export: prefixes out of order or overlapping');
    }
    for (; depth < length - 1; depth++) {
      const child = this.#node();
      this.#set(this.#path[depth]!, bitAt(start, at, depth), child);
      this.#path[depth + 1] = child;
    }
    this.#set(this.#path[length - 1]!, bitAt(start, at, length - 1), record);
    for (let i = 0; i < 4; i++) this.#last[i] = start[at + i]!;
    this.#lastLength = length;
  }

  /** The record of the prefix `length` bits long on the last prefix's path. */
  recordOnPath(length: number): number {
    return this.#records[2 * this.#path[length - 1]! + bitAt(this.#last, 0, length - 1)]!;
  }

  /**
   * The tree's bytes; `answerValue(id)` is the record value of an answer.
   * Nodes keep the numbers they were made with: depth first, left before
   * right, as in MaxMind's and DB-IP's files, so a step to the left reads the
   * next node. (Numbered breadth first, libmaxminddb walked this tree three
   * times slower: every deep level was a cache miss.)
   */
  bytes(recordSize: RecordSize, answerValue: (id: number) => number): Buffer {
    const nodeBytes = recordSize / 4;
    const out = Buffer.alloc(this.#nodes * nodeBytes);
    const records = this.#records;
    const value = (r: number) => {
      if (r === UNSET) throw new Error('mmdb export: a part of the address space has no record');
      return r >= ANSWER ? answerValue(r - ANSWER) : r;
    };
    for (let node = 0; node < this.#nodes; node++) writeNode(out, recordSize, node * nodeBytes, value(records[2 * node]!), value(records[2 * node + 1]!));
    return out;
  }

  #node(): number {
    if (2 * this.#nodes + 2 > this.#records.length) {
      const grown = new Uint32Array(2 * this.#records.length).fill(UNSET);
      grown.set(this.#records);
      this.#records = grown;
    }
    return this.#nodes++;
  }

  #set(node: number, side: number, record: number): void {
    const i = 2 * node + side;
    if (this.#records[i] !== UNSET) throw new Error('mmdb export: prefixes overlap');
    this.#records[i] = record;
  }
}

/**
 * The parts of an IPv6 tree that do not come from the IPv6 trie: the IPv4
 * subtree itself (filled from the IPv4 trie first) and the aliases that point
 * at it. An IPv6 prefix inside one is left out; one that holds one is split
 * around it; the first to reach an alias places the alias instead.
 */
interface Carve {
  start: readonly number[];
  length: number;
  alias: boolean;
  placed: boolean;
}

/**
 * Places every prefix of the snapshot's answer space in a tree, and each
 * answer in the data section when a prefix first places it (answers only
 * found where the IPv4 subtree and its aliases go are never written);
 * returns the tree, the answers' offsets in the data section and the prefix
 * counts.
 */
function buildTree(snapshot: Snapshot, data: DataSection): { tree: SearchTree; offsets: number[]; records: number; prefixes: [number, number] } {
  const tree = new SearchTree();
  const shape = recordShaper();
  /** Answers by id, until placed. */
  const pending = new Map<number, Answer>();
  let seen = 0;
  /** Data section offsets by answer id, once written. */
  const offsets: number[] = [];
  let records = 0;
  const insert = (start: ArrayLike<number>, at: number, length: number, id: number): void => {
    if (offsets[id] === undefined) {
      offsets[id] = data.add(shape(pending.get(id)!));
      pending.delete(id);
      records++;
    }
    tree.insert(start, at, length, (ANSWER | id) >>> 0);
  };
  const carves: Carve[] = [
    { start: [0, 0, 0, 0], length: IPV4_SUBTREE_DEPTH, alias: false, placed: true },
    ...IPV4_ALIASES.map((a) => ({ start: a.start, length: a.length, alias: true, placed: false })),
  ];
  const prefixes: [number, number] = [0, 0];
  const v4 = new Uint32Array(4);
  let ipv4Root = UNSET;

  const placeV6 = (start: ArrayLike<number>, at: number, length: number, id: number): void => {
    for (const carve of carves) {
      if (firstDifference(start, at, carve.start, 0) < Math.min(length, carve.length)) continue; // apart
      if (length >= carve.length) {
        if (carve.alias && !carve.placed) {
          tree.insert(carve.start, 0, carve.length, ipv4Root);
          carve.placed = true;
        }
        return;
      }
      const low = Uint32Array.from({ length: 4 }, (_, i) => start[at + i]!);
      const high = low.slice();
      high[length >>> 5]! |= 1 << (31 - (length & 31));
      placeV6(low, 0, length + 1, id);
      placeV6(high, 0, length + 1, id);
      return;
    }
    insert(start, at, length, id);
  };

  snapshot.answerSpace((batch) => {
    for (const answer of batch.answers) pending.set(seen++, answer);
    const e = batch.entries;
    for (let at = 0; at < batch.count * EXPORT_ENTRY_WORDS; at += EXPORT_ENTRY_WORDS) {
      const id = e[at + ExportEntry.Answer]!;
      const length = e[at + ExportEntry.Length]!;
      if (e[at + ExportEntry.Family] === 4) {
        v4[3] = e[at + ExportEntry.Start]!;
        insert(v4, 0, IPV4_SUBTREE_DEPTH + length, id);
        prefixes[0]++;
      } else {
        if (ipv4Root === UNSET) ipv4Root = tree.recordOnPath(IPV4_SUBTREE_DEPTH);
        placeV6(e, at + ExportEntry.Start, length, id);
        prefixes[1]++;
      }
    }
  });
  return { tree, offsets, records, prefixes };
}

/**
 * Turns answers into records: the check result's fields under their own
 * names (a null field is left out: MaxMind DB has no null), then the paths
 * GeoIP2 readers know (City, ASN and Anonymous IP). The values answers share
 * are made once per company, location, ASN and country.
 */
function recordShaper(): (answer: Answer) => { readonly [key: string]: Value } {
  const companies = new Map<Company, Shared>();
  const locations = new Map<Location, { location: Shared; country?: Shared; city?: Shared; subdivisions?: Shared }>();
  const asns = new Map<NonNullable<Answer['asn']>, { asn: Shared; number: TypedNumber }>();
  const countries = new Map<string, Shared>();
  const scores = new Map<number, TypedNumber>();

  const withoutNulls = (o: { readonly [key: string]: Value | null }): Record<string, Value> => {
    const out: Record<string, Value> = {};
    for (const key in o) if (o[key] !== null) out[key] = o[key]!;
    return out;
  };

  const locationParts = (l: Location) => {
    let parts = locations.get(l);
    if (parts === undefined) {
      parts = {
        location: new Shared(
          withoutNulls({
            ...l,
            latitude: l.latitude === null ? null : new TypedNumber(DataType.Double, l.latitude),
            longitude: l.longitude === null ? null : new TypedNumber(DataType.Double, l.longitude),
          }),
        ),
      };
      if (l.country !== null) {
        const key = `${l.country}\n${l.country_name}`;
        let country = countries.get(key);
        if (country === undefined) {
          country = new Shared(l.country_name === null ? { iso_code: l.country } : { iso_code: l.country, names: { en: l.country_name } });
          countries.set(key, country);
        }
        parts.country = country;
      }
      if (l.city !== null) parts.city = new Shared({ names: { en: l.city } });
      if (l.region !== null) parts.subdivisions = new Shared([{ names: { en: l.region } }]);
      locations.set(l, parts);
    }
    return parts;
  };

  const asnParts = (a: NonNullable<Answer['asn']>) => {
    let parts = asns.get(a);
    if (parts === undefined) {
      const number = new TypedNumber(DataType.Uint32, a.number);
      parts = { asn: new Shared(withoutNulls({ number, name: a.name })), number };
      asns.set(a, parts);
    }
    return parts;
  };

  return (a) => {
    let score = scores.get(a.risk_score);
    if (score === undefined) scores.set(a.risk_score, (score = new TypedNumber(DataType.Uint16, a.risk_score)));
    const record: Record<string, Value> = {
      is_vpn: a.is_vpn,
      is_proxy: a.is_proxy,
      is_tor: a.is_tor,
      is_relay: a.is_relay,
      is_hosting: a.is_hosting,
      risk_score: score,
      recommendation: a.recommendation,
    };
    if (a.company !== null) {
      let company = companies.get(a.company);
      if (company === undefined) companies.set(a.company, (company = new Shared(withoutNulls({ ...a.company }))));
      record.company = company;
    }
    const location = a.location === null ? null : locationParts(a.location);
    const asn = a.asn === null ? null : asnParts(a.asn);
    if (location !== null) record.location = location.location;
    if (asn !== null) record.asn = asn.asn;
    if (location?.country) record.country = location.country;
    if (location?.city) record.city = location.city;
    if (location?.subdivisions) record.subdivisions = location.subdivisions;
    if (asn !== null) record.autonomous_system_number = asn.number;
    if (a.asn?.name) record.autonomous_system_organization = a.asn.name;
    // The Anonymous IP database's traits, present only when true as there:
    // is_anonymous when any kind of anonymising or hosting network lists it.
    if (a.is_vpn || a.is_proxy || a.is_tor || a.is_relay || a.is_hosting) record.is_anonymous = true;
    if (a.is_vpn) record.is_anonymous_vpn = true;
    if (a.is_hosting) record.is_hosting_provider = true;
    if (a.is_proxy) record.is_public_proxy = true;
    if (a.is_tor) record.is_tor_exit_node = true;
    return record;
  };
}

/** The metadata: the format's keys, then what was exported and the sources with their licenses. */
function metadata(snapshot: Snapshot, nodeCount: number, recordSize: RecordSize): Buffer {
  const info = snapshot.info();
  const sources = info.meta.sources.map((s) => ({ name: s.name, kind: s.kind, location: s.location, license: typeof s.license === 'string' ? s.license : 'unknown' }));
  const described = sources.map((s) => `${s.name} (${s.license})`).join(', ');
  const builder = typeof info.meta.builder === 'string' ? info.meta.builder : 'ip-reputation';
  const u16 = (n: number) => new TypedNumber(DataType.Uint16, n);
  const section = new DataSection(false);
  section.add({
    binary_format_major_version: u16(2),
    binary_format_minor_version: u16(0),
    build_epoch: new TypedNumber(DataType.Uint64, Math.floor(Date.parse(info.built_at) / 1000)),
    database_type: MMDB_DATABASE_TYPE,
    description: {
      en: `ip-reputation snapshot ${path.basename(info.path)} built ${info.built_at} by ${builder}: VPN, proxy, Tor, private relay and hosting flags, risk score, company, location and ASN. Sources: ${described}.`,
    },
    ip_version: u16(6),
    languages: ['en'],
    node_count: new TypedNumber(DataType.Uint32, nodeCount),
    record_size: u16(recordSize),
    ipr_snapshot: { file: path.basename(info.path), built_at: info.built_at, checksum: info.checksum, builder },
    ipr_sources: sources,
  });
  return Buffer.concat([METADATA_MARKER, section.bytes()]);
}

/** The smallest record size whose records reach every node and the end of the data section. */
function recordSizeFor(nodeCount: number, dataBytes: number): RecordSize {
  const largest = nodeCount + DATA_SECTION_SEPARATOR + dataBytes;
  const size = RECORD_SIZES.find((bits) => largest < 2 ** bits);
  if (size === undefined) throw new IprError('export_failed', `the export is too large for a MaxMind DB (${nodeCount} nodes, ${dataBytes} bytes of data)`);
  return size;
}

/** The folder `out` goes in must exist, and `out` must not be a folder. */
function checkDestination(out: string): void {
  const folder = path.dirname(path.resolve(out));
  let stat;
  try {
    stat = statSync(folder);
  } catch {
    throw new IprError('export_failed', `${out}: the folder ${folder} does not exist`);
  }
  if (!stat.isDirectory()) throw new IprError('export_failed', `${out}: ${folder} is not a folder`);
  try {
    if (statSync(out).isDirectory()) throw new IprError('export_failed', `${out} is a folder; --out takes a file name`);
  } catch (error) {
    if (error instanceof IprError) throw error;
  }
}

/** Writes `parts` to `file` atomically: a partial file, synced, renamed over `file`. */
function writeAtomically(file: string, parts: Buffer[]): number {
  const partial = partialPath(file);
  let bytes = 0;
  try {
    const fd = openSync(partial, 'w', 0o644);
    try {
      for (const part of parts) {
        for (let done = 0; done < part.length; ) done += writeSync(fd, part, done);
        bytes += part.length;
      }
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(partial, file);
    syncDir(path.dirname(path.resolve(file)));
  } catch (error) {
    rmSync(partial, { force: true });
    throw new IprError('export_failed', `${file}: could not be written (${(error as Error).message}); nothing was replaced`);
  }
  return bytes;
}

/** Exports the snapshot published in `dataDir` as a MaxMind DB file. */
export function exportMmdb(options: ExportOptions): ExportSummary {
  const started = performance.now();
  checkDestination(options.out);
  const snapshot = openSnapshot(options.dataDir);
  try {
    const data = new DataSection();
    const { tree, offsets, records, prefixes } = buildTree(snapshot, data);
    const nodeCount = tree.nodeCount;
    const recordSize = recordSizeFor(nodeCount, data.size);
    const treeBytes = tree.bytes(recordSize, (id) => nodeCount + DATA_SECTION_SEPARATOR + offsets[id]!);
    const bytes = writeAtomically(options.out, [treeBytes, Buffer.alloc(DATA_SECTION_SEPARATOR), data.bytes(), metadata(snapshot, nodeCount, recordSize)]);
    return {
      file: options.out,
      snapshot: snapshot.info().path,
      bytes,
      nodeCount,
      recordSize,
      prefixes,
      answers: records,
      dataBytes: data.size,
      seconds: (performance.now() - started) / 1000,
    };
  } finally {
    snapshot.close();
  }
}
