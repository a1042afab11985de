/**
 * How far a listing is believed (README "Sources": trust and large
 * networks). A flag source has a `trust` above 0 and at most 1 (the
 * default). Listings of a source of trust 1 go straight to the tables.
 * Those of weaker sources (a big unchecked proxy aggregate, abuse reports,
 * hosting lists that also name consumer ISPs) are held here until every
 * source is read; then, per prefix and table:
 *
 *   - the trust of the weaker sources listing that prefix adds up, and at 1
 *     the prefix is used (corroboration);
 *   - below 1, it is used only outside a large network: where the ASN the
 *     snapshot answers for the prefix's first address announces at most
 *     LARGE_NETWORK_ADDRESSES IPv4 addresses (or where no ASN is known).
 *
 * Consumer ISPs that also sell hosting, and the dynamic pools where a listed
 * proxy address soon belongs to another subscriber, are large networks; so
 * are the big clouds, which the stronger lists name anyway. Hosting
 * companies named by one list only are smaller. asn-list sources follow the
 * same rule per ASN (records.ts resolveAsnFlags).
 * Measured on the evaluation sets: README "Sources", `npm run bench:quality`.
 */
import { IprError } from '../errors.js';
import { NO_RECORD, type NativeSnapshotWriter } from '../native.js';
import { compareAddresses, type Family } from '../address.js';
import type { RangeSink, TableSink } from './ranges.js';

/** A network announcing more IPv4 addresses than this (a /13) is large. */
export const LARGE_NETWORK_ADDRESSES = 2 ** 19;

/** Trust sums within this of 1 count as 1 (0.5 + 0.3 + 0.2 in floating point). */
const EPSILON = 1e-9;

export function believed(trust: number): boolean {
  return trust >= 1 - EPSILON;
}

/** What the scale reads of the build's records (records.ts): the ASN number of an ASN record. */
interface AsnNumbers {
  asnNumber(record: number): number;
}

/** The ASNs a snapshot answers, and how large each is. */
export class NetworkScale {
  readonly #writer: Pick<NativeSnapshotWriter, 'asnRecordsOf' | 'asnV4AddressCounts'>;
  readonly #records: AsnNumbers;
  #sizes: Map<number, number> | null = null;

  constructor(writer: Pick<NativeSnapshotWriter, 'asnRecordsOf' | 'asnV4AddressCounts'>, records: AsnNumbers) {
    this.#writer = writer;
    this.#records = records;
  }

  /** IPv4 addresses announced by an ASN number (all its records together). */
  ipv4Addresses(asn: number): number {
    if (this.#sizes === null) {
      this.#sizes = new Map();
      this.#writer.asnV4AddressCounts().forEach((count, record) => {
        const asnNumber = this.#records.asnNumber(record);
        this.#sizes!.set(asnNumber, (this.#sizes!.get(asnNumber) ?? 0) + count);
      });
    }
    return this.#sizes.get(asn) ?? 0;
  }

  isLarge(asn: number): boolean {
    return this.ipv4Addresses(asn) > LARGE_NETWORK_ADDRESSES;
  }

  /** For `count` addresses of one family (network order, back to back): 1 where the ASN answering it is large. */
  largeAt(family: Family, addresses: Uint8Array, count: number): Uint8Array {
    const records = this.#writer.asnRecordsOf(family, addresses, count);
    return Uint8Array.from(records, (record) => (record !== NO_RECORD && this.isLarge(this.#records.asnNumber(record)) ? 1 : 0));
  }
}

interface Listing {
  /** A TABLE_ID of src/result.ts. */
  table: number;
  value: number;
  trust: number;
  sources: number[];
}

/**
 * The listings of sources below trust 1, by table and range. Importers write
 * into `sinkFor(source, trust)` as they would into the range sink.
 */
export class WeakListings {
  /** Key: the table's char code, then the first and last address as latin1 bytes. */
  readonly #listings = new Map<string, Listing>();

  get size(): number {
    return this.#listings.size;
  }

  sinkFor(source: number, trust: number): TableSink {
    const scratchFirst = new Uint8Array(16);
    const scratchLast = new Uint8Array(16);
    const add = (table: number, family: Family, first: Uint8Array, last: Uint8Array, value: number) => {
      const width = family === 4 ? 4 : 16;
      const key = String.fromCharCode(table) + Buffer.from(first.buffer, first.byteOffset, width).toString('latin1') +
        Buffer.from(last.buffer, last.byteOffset, width).toString('latin1');
      const listing = this.#listings.get(key);
      if (listing === undefined) {
        this.#listings.set(key, { table, value, trust, sources: [source] });
      } else if (!listing.sources.includes(source)) {
        listing.trust += trust;
        listing.sources.push(source);
      }
    };
    return {
      addPrefix: (table, family, bytes, len, value) => {
        const width = family === 4 ? 4 : 16;
        for (let i = 0; i < width; i++) {
          const keep = (0xff << (8 - Math.min(8, Math.max(0, len - 8 * i)))) & 0xff;
          scratchFirst[i] = bytes[i]! & keep;
          scratchLast[i] = (bytes[i]! & keep) | (~keep & 0xff);
        }
        add(table, family, scratchFirst, scratchLast, value);
      },
      addRange: (table, family, first, last, value) => {
        if (compareAddresses(first, last, family === 4 ? 4 : 16) > 0) throw new IprError('invalid_argument', 'range ends before it starts');
        add(table, family, first, last, value);
      },
    };
  }

  /**
   * Adds every listing the rule keeps to `sink`, once per source listing it
   * (its evidence); returns, per source, how many of its listings were left out.
   */
  resolve(sink: RangeSink, scale: NetworkScale): Map<number, number> {
    const large = new Map<string, boolean>();
    for (const width of [4, 16]) {
      const keys = [...this.#listings].filter(([key, l]) => key.length === 1 + 2 * width && !believed(l.trust)).map(([key]) => key);
      const firsts = Buffer.alloc(keys.length * width);
      keys.forEach((key, i) => firsts.write(key.slice(1, 1 + width), i * width, 'latin1'));
      const flags = keys.length === 0 ? new Uint8Array(0) : scale.largeAt(width === 4 ? 4 : 6, firsts, keys.length);
      keys.forEach((key, i) => large.set(key, flags[i] === 1));
    }
    const leftOut = new Map<number, number>();
    for (const [key, l] of this.#listings) {
      if (large.get(key) === true) {
        for (const source of l.sources) leftOut.set(source, (leftOut.get(source) ?? 0) + 1);
        continue;
      }
      const bytes = Buffer.from(key.slice(1), 'latin1');
      const width = bytes.length / 2;
      for (const source of l.sources) {
        sink.source = source;
        sink.addRange(l.table, width === 4 ? 4 : 6, bytes.subarray(0, width), bytes.subarray(width), l.value);
      }
    }
    return leftOut;
  }
}
