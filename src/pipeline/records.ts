/**
 * The records a snapshot points to (companies, ASNs, locations), deduplicated
 * and serialised once as ASCII JSON: the lookup side decodes or splices them
 * without re-encoding.
 *
 * Company of an address, in order (documented in the README):
 *  1. the `company` of a flag source listing it (cloud provider ranges, a
 *     VPN provider's own server list);
 *  2. else the operator of its ASN: named after the ASN's organisation, typed
 *     `vpn` when an asn-list source of kind vpn names the ASN, `hosting` when
 *     one of kind hosting does, else by the organisation's name (see
 *     companyTypeFromName).
 */
import { NO_RECORD, RecordKind, type NativeSnapshotWriter } from '../native.js';
import { FLAG_BIT, TABLE_ID, type Company, type CompanyType, type Location } from '../result.js';
import { isFlagKind, type FlagKind, type Kind } from './sources.js';
import { believed, type NetworkScale } from './trust.js';

/** JSON with every non-ASCII character escaped, as the snapshot stores records. */
export function asciiJson(value: unknown): string {
  return JSON.stringify(value).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

class RecordSet {
  readonly #ids = new Map<string, number>();
  readonly texts: string[] = [];

  id(text: string): number {
    let id = this.#ids.get(text);
    if (id === undefined) {
      id = this.texts.length;
      this.texts.push(text);
      this.#ids.set(text, id);
    }
    return id;
  }

  get size(): number {
    return this.texts.length;
  }

  toNative(writer: NativeSnapshotWriter, kind: RecordKind): void {
    const encoded = this.texts.map((t) => Buffer.from(t, 'latin1'));
    const offsets = new Uint32Array(encoded.length + 1);
    encoded.forEach((b, i) => (offsets[i + 1] = offsets[i]! + b.length));
    writer.setRecords(kind, Buffer.concat(encoded), offsets);
  }
}

// The rules that type an organisation from its name, first match wins.
const NAME_RULES: [CompanyType, RegExp][] = [
  ['education', /universi|college|school|academ|institute of technology|polytechnic|research (and|&) education|\bedu(cation)?\b|\bnren\b/i],
  ['government', /government|ministry|ministerio|ministere|federal|municipal|county of|city of|state of|department of|\bpolice\b|\barmy\b|\bnavy\b|air force|defen[cs]e|parliament|gouvernement|\bgov\b/i],
  ['hosting', /hosting|\bhost\b|cloud|data ?cent(er|re)|datacenter|\bservers?\b|\bvps\b|colocation|\bcolo\b|dedicated|\bcompute\b/i],
  ['isp', /tele(com|kom|fon|phone|net)|communication|broadband|\bcable\b|mobile|wireless|cellular|internet|\bisp\b|fib(er|re)|\bnetworks?\b|\btel\b|\bdsl\b|\bgsm\b|\blte\b|\bcomcast\b|\bverizon\b|\bvodafone\b|\borange\b/i],
];

/** A company type from an organisation name alone; `business` when no rule matches. */
export function companyTypeFromName(name: string): CompanyType {
  for (const [type, rule] of NAME_RULES) if (rule.test(name)) return type;
  return 'business';
}

const regionNames = new Intl.DisplayNames(['en'], { type: 'region' });
const countryNames = new Map<string, string | null>();

/** The English name of an ISO 3166-1 alpha-2 code, or null for an unknown code. */
export function countryName(code: string): string | null {
  let name = countryNames.get(code);
  if (name === undefined) {
    let found: string | undefined;
    try {
      found = /^[A-Z]{2}$/.test(code) ? regionNames.of(code) : undefined;
    } catch {
      found = undefined;
    }
    name = found === undefined || found === code || found === 'Unknown Region' ? null : found;
    countryNames.set(code, name);
  }
  return name;
}

export function roundDegrees(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? Math.round(value * 1e4) / 1e4 : null;
}

function textOrNull(value: unknown): string | null {
  return typeof value === 'string' && value.trim() !== '' ? value.trim() : null;
}

/** The asn-list sources naming one ASN for one kind, and their trust added up. */
interface AsnListing {
  trust: number;
  sources: number[];
}

export class Records {
  readonly companies = new RecordSet();
  readonly asns = new RecordSet();
  readonly locations = new RecordSet();
  /** The name of each source of the build, by its index in the configuration (evidence names them). */
  readonly sources = new RecordSet();
  readonly #asnNumbers: number[] = [];
  readonly #asnNames: (string | null)[] = [];
  /** ASN number -> kind -> the asn-list sources naming it. */
  readonly #asnListings = new Map<number, Map<FlagKind, AsnListing>>();
  /** ASN number -> flag bits and the sources behind them, once resolveAsnFlags ran. */
  #asnFlags = new Map<number, { flags: number; evidence: [number, number][] }>();

  company(company: { name: string; type: CompanyType; domain?: string | null }): number {
    const record: Company = { name: company.name, type: company.type, domain: company.domain ?? null };
    return this.companies.id(asciiJson(record));
  }

  asn(number: number, name: string | null): number {
    const text = asciiJson({ number, name: textOrNull(name) });
    const before = this.asns.size;
    const id = this.asns.id(text);
    if (id === before) {
      this.#asnNumbers.push(number);
      this.#asnNames.push(textOrNull(name));
    }
    return id;
  }

  /** A location record id, or NO_RECORD when nothing in it is known. */
  location(fields: {
    country?: unknown;
    city?: unknown;
    region?: unknown;
    latitude?: unknown;
    longitude?: unknown;
  }): number {
    const country = textOrNull(fields.country)?.toUpperCase() ?? null;
    const record: Location = {
      country,
      country_name: country === null ? null : countryName(country),
      city: textOrNull(fields.city),
      region: textOrNull(fields.region),
      latitude: roundDegrees(fields.latitude),
      longitude: roundDegrees(fields.longitude),
    };
    if (Object.values(record).every((v) => v === null)) return NO_RECORD;
    return this.locations.id(asciiJson(record));
  }

  /** The ASN number of an ASN record. */
  asnNumber(id: number): number {
    return this.#asnNumbers[id]!;
  }

  /** Source `source` (an index in the configuration), of trust `trust`, says every prefix of `asnNumber` gets the flag of `kind`. */
  flagAsn(asnNumber: number, kind: Kind, source: number, trust: number): void {
    if (!isFlagKind(kind)) return;
    let byKind = this.#asnListings.get(asnNumber);
    if (byKind === undefined) this.#asnListings.set(asnNumber, (byKind = new Map()));
    const listing = byKind.get(kind);
    if (listing === undefined) byKind.set(kind, { trust, sources: [source] });
    else if (!listing.sources.includes(source)) {
      listing.trust += trust;
      listing.sources.push(source);
    }
  }

  /**
   * Decides which listed ASNs get their flag (trust.ts): those whose sources'
   * trust adds up to 1, and the others that are not large networks.
   * Returns, per source, how many of the ASNs it named were left out.
   */
  resolveAsnFlags(scale: NetworkScale): Map<number, number> {
    const leftOut = new Map<number, number>();
    this.#asnFlags = new Map();
    for (const [number, byKind] of this.#asnListings) {
      let flags = 0;
      const evidence: [number, number][] = [];
      for (const [kind, listing] of byKind) {
        if (believed(listing.trust) || !scale.isLarge(number)) {
          flags |= FLAG_BIT[kind];
          for (const source of listing.sources) evidence.push([TABLE_ID[kind], source]);
        } else {
          for (const source of listing.sources) leftOut.set(source, (leftOut.get(source) ?? 0) + 1);
        }
      }
      if (flags !== 0) this.#asnFlags.set(number, { flags, evidence });
    }
    return leftOut;
  }

  /** How many ASN records the asn-list sources flagged (for the build summary). */
  flaggedAsnRecords(): number {
    return this.#asnNumbers.filter((n) => this.#asnFlags.has(n)).length;
  }

  /** Hands every record table, the per-ASN flags and companies, and the ASN evidence to the writer (after resolveAsnFlags). */
  toNative(writer: NativeSnapshotWriter): void {
    const flags = new Uint8Array(this.#asnNumbers.length);
    const companies = new Uint32Array(this.#asnNumbers.length);
    const evidence: { records: number[]; sources: number[]; tables: number[] } = { records: [], sources: [], tables: [] };
    this.#asnNumbers.forEach((number, id) => {
      const flagged = this.#asnFlags.get(number);
      const asnFlags = flagged?.flags ?? 0;
      flags[id] = asnFlags;
      for (const [table, source] of flagged?.evidence ?? []) {
        evidence.records.push(id);
        evidence.sources.push(source);
        evidence.tables.push(table);
      }
      const name = this.#asnNames[id];
      if (name === null || name === undefined) {
        companies[id] = NO_RECORD;
        return;
      }
      const type: CompanyType =
        asnFlags & FLAG_BIT.vpn ? 'vpn' : asnFlags & FLAG_BIT.hosting ? 'hosting' : companyTypeFromName(name);
      companies[id] = this.company({ name, type, domain: null });
    });
    writer.setAsnAttributes(flags, companies);
    writer.setAsnEvidence(Uint32Array.from(evidence.records), Uint16Array.from(evidence.sources), Uint8Array.from(evidence.tables));
    this.companies.toNative(writer, RecordKind.Company);
    this.asns.toNative(writer, RecordKind.Asn);
    this.locations.toNative(writer, RecordKind.Location);
    this.sources.toNative(writer, RecordKind.Source);
  }
}
