/**
 * The check result, defined once (docs/API.md "The check result"): its
 * fields and the fields of the objects inside it, in order, with their JSON
 * Schema; the company types and recommendations; the tables behind the
 * flags, in the addon's order.
 *
 * Made from this module: the OpenAPI schemas (server/openapi.ts), the objects
 * lookup() answers and the JSON texts the addon writes around its record
 * texts for servers (snapshot.ts, binding.cc), the source kinds
 * (pipeline/sources.ts), the flag bits of the risk table (risk.ts). Held to it
 * by tests: the addon's table order and the records the pipeline writes
 * (test/result.test.ts), the addon's JSON against lookup()'s objects
 * (test/differential.test.ts).
 */

/**
 * The flag tables, in the addon's table order (native/src/snapshot_format.h
 * `Table`): table t sets bit 1 << t of an answer's flags.
 */
export const FLAG_TABLES = ['tor', 'vpn', 'proxy', 'relay', 'hosting'] as const;
export type Flag = (typeof FLAG_TABLES)[number];

/** Every table of a snapshot, in the addon's order: the flags, then ASN and location. A source's `kind` names one. */
export const TABLES = [...FLAG_TABLES, 'asn', 'geo'] as const;
export type TableName = (typeof TABLES)[number];

/** A table's number in the addon. */
export const TABLE_ID = Object.fromEntries(TABLES.map((name, id) => [name, id])) as { readonly [T in TableName]: number };

/** A flag's bit in an answer's flags. */
export const FLAG_BIT = Object.fromEntries(FLAG_TABLES.map((name, t) => [name, 1 << t])) as { readonly [F in Flag]: number };

/** The check result's field of a flag: `is_` and the table's name. */
export type FlagField = `is_${Flag}`;

export const COMPANY_TYPES = ['hosting', 'isp', 'business', 'education', 'government', 'vpn'] as const;
export type CompanyType = (typeof COMPANY_TYPES)[number];

export const RECOMMENDATIONS = ['allow', 'verify', 'block'] as const;
export type Recommendation = (typeof RECOMMENDATIONS)[number];

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

/** A check result; its fields come in the order of {@link CHECK_RESULT_FIELDS}. */
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

/** One source listing an address: the evidence an explained answer adds (docs/API.md "Evidence"). */
export interface Evidence {
  /** The flag it sets. */
  table: Flag;
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

type Schema = Readonly<Record<string, unknown>>;
/** An object's fields in order, each with its JSON Schema; the type names every field of T, and no other. */
type Fields<T> = { readonly [K in keyof T]-?: Schema };

const nullable = (type: string, extra: object = {}): Schema => ({ type: [type, 'null'], ...extra });
const nullableObject = (name: string): Schema => ({ oneOf: [{ $ref: `#/components/schemas/${name}` }, { type: 'null' }] });

/** The check result's fields, in the order answers give them (the interface's order). */
export const CHECK_RESULT_FIELDS: Fields<CheckResult> = {
  ip: { type: 'string', description: 'The canonical text of the address (RFC 5952 for IPv6; IPv4-mapped as ::ffff:a.b.c.d).' },
  is_vpn: { type: 'boolean', description: 'The address belongs to a VPN provider.' },
  is_proxy: { type: 'boolean', description: 'The address is a known proxy server.' },
  is_tor: { type: 'boolean', description: 'The address is a Tor exit node.' },
  is_relay: { type: 'boolean', description: "A device maker's private relay address (iCloud Private Relay)." },
  is_hosting: { type: 'boolean', description: 'The address is in a hosting or datacenter network.' },
  risk_score: { type: 'integer', minimum: 0, maximum: 100 },
  recommendation: { type: 'string', enum: RECOMMENDATIONS },
  company: nullableObject('Company'),
  location: nullableObject('Location'),
  asn: nullableObject('Asn'),
};

export const COMPANY_FIELDS: Fields<Company> = {
  name: { type: 'string' },
  type: {
    type: 'string',
    enum: COMPANY_TYPES,
    description:
      "From a provider source (cloud ranges: hosting; a VPN provider's own server list: vpn), else from the ASN: vpn or hosting when a VPN or datacenter ASN list names it, " +
      'else from the organisation name (education, government, hosting, isp), else business.',
  },
  domain: nullable('string'),
};

export const LOCATION_FIELDS: Fields<Location> = {
  country: nullable('string', { description: 'ISO 3166-1 alpha-2 code.' }),
  country_name: nullable('string'),
  city: nullable('string'),
  region: nullable('string'),
  latitude: nullable('number', { description: 'Decimal degrees, 4 places.' }),
  longitude: nullable('number', { description: 'Decimal degrees, 4 places.' }),
};

/** The ASN record of a snapshot holds every field but the last, `route`, which the lookup adds. */
export const ASN_FIELDS: Fields<Asn> = {
  number: { type: 'integer' },
  name: nullable('string'),
  route: { type: 'string', description: 'The most specific announced prefix containing the address, in CIDR.' },
};

export const EVIDENCE_FIELDS: Fields<Evidence> = {
  table: { type: 'string', enum: FLAG_TABLES, description: 'The flag the listing sets.' },
  source: { type: 'string', description: 'The source, by its name in the sources configuration of the snapshot.' },
  prefix: { type: 'string', description: 'The listed prefix holding the address, in CIDR; for an ASN list, the route of the ASN.' },
  asn: { type: 'integer', description: 'For an ASN list: the ASN it names.' },
};

function objectSchema(fields: Record<string, Schema>, description?: string, required: string[] = Object.keys(fields)): Schema {
  return {
    type: 'object',
    ...(description === undefined ? {} : { description }),
    required,
    additionalProperties: false,
    properties: fields,
  };
}

/** The OpenAPI schemas of the check result and its objects. */
export function resultSchemas(): Record<'CheckResult' | 'Evidence' | 'Company' | 'Location' | 'Asn', Schema> {
  const evidence: Schema = {
    type: 'array',
    description: 'With `?explain=1` only: every source listing the address, in the tables whose flag it carries.',
    items: { $ref: '#/components/schemas/Evidence' },
  };
  return {
    CheckResult: objectSchema(
      { ...CHECK_RESULT_FIELDS, evidence },
      'Fields in this order, no others (`evidence` only with `?explain=1`, after them). Special-purpose addresses ' +
        '(private, loopback, documentation...) answer all flags false, score 0, allow, and null objects.',
      Object.keys(CHECK_RESULT_FIELDS),
    ),
    Evidence: objectSchema(EVIDENCE_FIELDS, undefined, ['table', 'source', 'prefix']),
    Company: objectSchema(COMPANY_FIELDS),
    Location: objectSchema(LOCATION_FIELDS),
    Asn: objectSchema(ASN_FIELDS),
  };
}

/**
 * The check result of an address with `flags` and this risk, but for what a
 * lookup fills in (the address, company, location and ASN: empty), its fields
 * in the definition's order. lookup() copies the one of the answer's flags.
 */
export function resultTemplate(flags: number, score: number, recommendation: Recommendation): CheckResult {
  const result: Record<string, unknown> = {};
  for (const name of Object.keys(CHECK_RESULT_FIELDS)) {
    if (name === 'ip') result[name] = '';
    else if (name === 'risk_score') result[name] = score;
    else if (name === 'recommendation') result[name] = recommendation;
    else if (name.startsWith('is_')) result[name] = (flags & FLAG_BIT[name.slice(3) as Flag]) !== 0;
    else result[name] = null;
  }
  return result as unknown as CheckResult;
}

/**
 * The texts the addon writes around what it takes from the lookup, for the
 * JSON of a check result (binding.cc WriteJson): `open`, the address,
 * `flags[f]` (from the address's closing quote to the company's key, for
 * flag bits f), the company record, `location`, the location record, `asn`,
 * the ASN record but its closing brace, `route`, the route, `"}` and `}`.
 * The addon writes in that order: the definition keeps `ip` first, `company`,
 * `location` and `asn` last, and `route` last in the ASN (the JSON and the
 * objects are compared on real data in test/differential.test.ts).
 */
export interface ResultJsonTexts {
  open: string;
  flags: string[];
  location: string;
  asn: string;
  route: string;
}

const key = (name: string): string => `${JSON.stringify(name)}:`;

/** The addon's texts for the templates of every flag combination ({@link resultTemplate}), by flag bits. */
export function resultJsonTexts(templates: readonly CheckResult[]): ResultJsonTexts {
  const names = Object.keys(CHECK_RESULT_FIELDS) as (keyof CheckResult)[];
  const between = names.slice(1, names.indexOf('company'));
  return {
    open: `{${key('ip')}"`,
    flags: templates.map((t) => `"${between.map((name) => `,${key(name)}${JSON.stringify(t[name])}`).join('')},${key('company')}`),
    location: `,${key('location')}`,
    asn: `,${key('asn')}`,
    route: `,${key('route')}"`,
  };
}
