/**
 * The sources configuration: which feeds and databases a snapshot is built
 * from. A JSON file with a `sources` array; README "Sources" documents it.
 *
 *   { "name": "vpn-ipv4", "kind": "vpn", "format": "cidr-list",
 *     "url": "https://.../vpn/ipv4.txt" }
 *
 * Exactly one of `path` (relative to the configuration file), `url` (fetched
 * at build time) or `package` (a file inside an installed npm package, such
 * as "@ip-location-db/asn/asn-ipv4.csv") says where the data is.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { IprError } from '../errors.js';
import { redactUrl } from '../text.js';
import type { CompanyType } from '../snapshot.js';

export const KINDS = ['tor', 'vpn', 'proxy', 'relay', 'hosting', 'asn', 'geo'] as const;
export type Kind = (typeof KINDS)[number];

const FLAG_KINDS: readonly Kind[] = ['tor', 'vpn', 'proxy', 'relay', 'hosting'];

/** Each format and the kinds it can feed. */
export const FORMATS = {
  /** One IP, CIDR or `first-last` range per line; `#` starts a comment. */
  'cidr-list': FLAG_KINDS,
  /** Tor relays: CSV `fingerprint, ipaddr, port` with a header line. */
  'tor-csv': ['tor'],
  /** Tor relays: an Onionoo `details` document; exit_addresses of relays with the Exit flag. */
  onionoo: ['tor'],
  /** Apple's egress ranges: CSV `prefix,country,region,city,postal`. */
  'icloud-csv': ['relay'],
  /** Proxies: `scheme://ip:port` or `ip:port` per line. */
  'proxy-list': ['proxy'],
  /** Proxies: a JSON array of {host, exit_ip, ...}; both addresses are listed. */
  'proxy-json': ['proxy'],
  /** AWS ip-ranges.json: prefixes[].ip_prefix and ipv6_prefixes[].ipv6_prefix. */
  'aws-json': ['hosting'],
  /** Google cloud.json / goog.json: prefixes[].ipv4Prefix / ipv6Prefix. */
  'google-json': ['hosting'],
  /** `AS123 # comment` per line: every prefix of those ASNs gets the flag. */
  'asn-list': FLAG_KINDS,
  /** CSV `first,last,asn,organisation`, addresses as text or as integers. */
  'asn-csv': ['asn'],
  /** A MaxMind DB: City-style records for geo, ASN-style records for asn. */
  mmdb: ['geo', 'asn'],
} as const satisfies Record<string, readonly Kind[]>;
export type Format = keyof typeof FORMATS;

export const COMPANY_TYPES: readonly CompanyType[] = ['hosting', 'isp', 'business', 'education', 'government', 'vpn'];

export interface CompanyConfig {
  name: string;
  type: CompanyType;
  domain?: string | null;
}

export interface Source {
  name: string;
  kind: Kind;
  format: Format;
  path?: string;
  url?: string;
  package?: string;
  /** For flag kinds: the operator of every listed range (a cloud provider, say). */
  company?: CompanyConfig;
  /** License and attribution, shown by `ipr info` and the API documentation. */
  license?: string;
  /** For `url` sources: the largest download accepted, in bytes (default fetch.ts MAX_FEED_BYTES). */
  max_bytes?: number;
}

export interface SourcesConfig {
  /** The configuration file; relative paths resolve against its folder. */
  file: string;
  sources: Source[];
}

function fail(file: string, message: string): never {
  throw new IprError('sources_invalid', `sources ${file}: ${message}`);
}

export function loadSources(file: string): SourcesConfig {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'));
  } catch (error) {
    fail(file, (error as Error).message);
  }
  const list = (parsed as { sources?: unknown })?.sources;
  if (!Array.isArray(list) || list.length === 0) fail(file, 'needs a non-empty "sources" array');
  const names = new Set<string>();
  const sources = list.map((entry: unknown, i: number): Source => {
    const s = entry as Record<string, unknown>;
    const where = `sources[${i}]`;
    if (typeof s !== 'object' || s === null) fail(file, `${where} is not an object`);
    if (typeof s.name !== 'string' || !/^[a-z0-9][a-z0-9._-]{0,63}$/.test(s.name)) {
      fail(file, `${where}.name must be 1-64 characters of a-z, 0-9, '.', '_' or '-'`);
    }
    if (names.has(s.name)) fail(file, `${where}.name "${s.name}" is used twice`);
    names.add(s.name);
    if (!KINDS.includes(s.kind as Kind)) fail(file, `${where}.kind must be one of ${KINDS.join(', ')}`);
    const kind = s.kind as Kind;
    if (!(typeof s.format === 'string' && s.format in FORMATS)) {
      fail(file, `${where}.format must be one of ${Object.keys(FORMATS).join(', ')}`);
    }
    const format = s.format as Format;
    if (!(FORMATS[format] as readonly Kind[]).includes(kind)) {
      fail(file, `${where}: format ${format} cannot feed kind ${kind} (it feeds ${FORMATS[format].join(', ')})`);
    }
    const origins = ['path', 'url', 'package'].filter((k) => s[k] !== undefined);
    if (origins.length !== 1 || typeof s[origins[0]!] !== 'string') {
      fail(file, `${where} needs exactly one of "path", "url" or "package", as a string`);
    }
    if (typeof s.url === 'string' && !/^https?:\/\//.test(s.url)) fail(file, `${where}.url must be http(s)`);
    const source: Source = { name: s.name, kind, format };
    if (typeof s.path === 'string') source.path = s.path;
    if (typeof s.url === 'string') source.url = s.url;
    if (typeof s.package === 'string') source.package = s.package;
    if (s.company !== undefined) {
      const c = s.company as Record<string, unknown>;
      if (!FLAG_KINDS.includes(kind)) fail(file, `${where}.company only applies to flag kinds`);
      if (typeof c?.name !== 'string' || !COMPANY_TYPES.includes(c.type as CompanyType)) {
        fail(file, `${where}.company needs a name and a type (${COMPANY_TYPES.join(', ')})`);
      }
      if (c.domain !== undefined && c.domain !== null && typeof c.domain !== 'string') {
        fail(file, `${where}.company.domain must be a string`);
      }
      source.company = { name: c.name, type: c.type as CompanyType, domain: (c.domain as string | undefined) ?? null };
    }
    if (s.max_bytes !== undefined) {
      if (source.url === undefined || !(Number.isSafeInteger(s.max_bytes) && (s.max_bytes as number) > 0)) {
        fail(file, `${where}.max_bytes must be a positive whole number of bytes, on a url source`);
      }
      source.max_bytes = s.max_bytes as number;
    }
    if (s.license !== undefined) {
      if (typeof s.license !== 'string') fail(file, `${where}.license must be a string`);
      source.license = s.license;
    }
    return source;
  });
  return { file: path.resolve(file), sources };
}

const projectRequire = createRequire(new URL('../../package.json', import.meta.url));

/** Where a source's data is on disk (for a `url` source: see fetch.ts). */
export function localPath(config: SourcesConfig, source: Source): string {
  if (source.path !== undefined) return path.resolve(path.dirname(config.file), source.path);
  if (source.package !== undefined) {
    try {
      return projectRequire.resolve(source.package);
    } catch {
      throw new IprError('source_unreadable', `source ${source.name}: package file ${source.package} is not installed`);
    }
  }
  throw new IprError('invalid_argument', `source ${source.name} has no local path`);
}

/**
 * The source's origin as written in the configuration, as it may be shown:
 * a URL without its user information and query string (redactUrl), where
 * feed credentials travel. It is what snapshots, reports and logs hold.
 */
export function origin(source: Source): string {
  return source.path ?? (source.url === undefined ? `npm:${source.package}` : redactUrl(source.url));
}
