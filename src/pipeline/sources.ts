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
import { parseDuration } from '../clock.js';
import { IprError } from '../errors.js';
import { COMPANY_TYPES, FLAG_TABLES, TABLES, type CompanyType, type Flag, type TableName } from '../result.js';
import { redactUrl } from '../text.js';

/** A source feeds one table of the snapshot: its kind is the table's name. */
export type Kind = TableName;

/** The kinds that set a flag (the others, asn and geo, describe an address). */
export const FLAG_KINDS: readonly FlagKind[] = FLAG_TABLES;
export type FlagKind = Flag;

export function isFlagKind(kind: Kind): kind is FlagKind {
  return (FLAG_KINDS as readonly Kind[]).includes(kind);
}

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
  /** An ASN per line (`AS123 # comment`, `123`, or CSV rows whose first field is the ASN, after a header): every prefix of those ASNs gets the flag. */
  'asn-list': FLAG_KINDS,
  /** Mullvad's relay list (app/v1/relays, or www/relays/all): ipv4_addr_in and ipv6_addr_in of every relay. */
  'mullvad-relays': ['vpn'],
  /** NordVPN's v1/servers array: station and ipv6_station of every server. */
  'nordvpn-servers': ['vpn'],
  /** ProtonVPN's vpn/logicals: ExitIP (what sites see) and EntryIP of LogicalServers[].Servers[]. */
  'protonvpn-logicals': ['vpn'],
  /** PIA's servers/v6: regions[].servers.<protocol>[].ip; the JSON is followed by a blank line and a signature. */
  'pia-servers': ['vpn'],
  /** IVPN's servers.json: hosts[].host of its wireguard and openvpn locations. */
  'ivpn-servers': ['vpn'],
  /** AirVPN's status API: servers[].ip_v4_in1..4 and ip_v6_in1..4. */
  'airvpn-status': ['vpn'],
  /** Windscribe's server list: ip, ip2 and ip3 of data[].groups[].nodes[]. */
  'windscribe-serverlist': ['vpn'],
  /** Surfshark's v4/server/clusters: host names (connectionName), resolved by DNS when the snapshot is built. */
  'surfshark-clusters': ['vpn'],
  /** CSV `first,last,asn,organisation`, addresses as text or as integers. */
  'asn-csv': ['asn'],
  /** A MaxMind DB: City-style records for geo, ASN-style records for asn. */
  mmdb: ['geo', 'asn'],
} as const satisfies Record<string, readonly Kind[]>;
export type Format = keyof typeof FORMATS;

/** The operator of the addresses of a VPN provider's own server list: its `company` unless the source names one. */
export const PROVIDER_OF_FORMAT: Partial<Record<Format, CompanyConfig>> = {
  'mullvad-relays': { name: 'Mullvad VPN', type: 'vpn', domain: 'mullvad.net' },
  'nordvpn-servers': { name: 'NordVPN', type: 'vpn', domain: 'nordvpn.com' },
  'protonvpn-logicals': { name: 'Proton VPN', type: 'vpn', domain: 'protonvpn.com' },
  'pia-servers': { name: 'Private Internet Access', type: 'vpn', domain: 'privateinternetaccess.com' },
  'ivpn-servers': { name: 'IVPN', type: 'vpn', domain: 'ivpn.net' },
  'airvpn-status': { name: 'AirVPN', type: 'vpn', domain: 'airvpn.org' },
  'windscribe-serverlist': { name: 'Windscribe', type: 'vpn', domain: 'windscribe.com' },
  'surfshark-clusters': { name: 'Surfshark', type: 'vpn', domain: 'surfshark.com' },
};

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
  /**
   * For flag kinds: how far one listing of this source is believed, above 0
   * and at most 1 (the default). trust.ts applies it: listings of sources
   * below 1 add up, and one alone is used only outside large networks.
   */
  trust?: number;
  /** The oldest copy used, in milliseconds (`max_age` in the file: "36h", "2d"...): an older copy is left out. */
  maxAgeMs?: number;
  /** For host-name formats (surfshark-clusters): DNS servers to ask ("1.1.1.1", "[::1]:53"), instead of the system's. */
  dns_servers?: string[];
  /**
   * For flag kinds: a single IPv6 address this source lists stands for its
   * prefix of this length (64: the host's subnet, where its address moves).
   */
  widen_ipv6?: number;
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
  // A source's index is its 16-bit id in the snapshot's evidence.
  if (list.length > 0xffff) fail(file, `has ${list.length} sources, more than ${0xffff}`);
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
    if (!TABLES.includes(s.kind as Kind)) fail(file, `${where}.kind must be one of ${TABLES.join(', ')}`);
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
      if (!isFlagKind(kind)) fail(file, `${where}.company only applies to flag kinds`);
      if (typeof c?.name !== 'string' || !(COMPANY_TYPES as readonly string[]).includes(c.type as string)) {
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
    if (s.company === undefined && PROVIDER_OF_FORMAT[format] !== undefined) source.company = { ...PROVIDER_OF_FORMAT[format]! };
    if (s.trust !== undefined) {
      if (!isFlagKind(kind) || typeof s.trust !== 'number' || !(s.trust > 0 && s.trust <= 1)) {
        fail(file, `${where}.trust must be a number above 0 and at most 1, on a flag kind`);
      }
      source.trust = s.trust;
    }
    if (s.max_age !== undefined) {
      const ms = typeof s.max_age === 'string' ? parseDuration(s.max_age) : null;
      if (ms === null) fail(file, `${where}.max_age must be a duration such as "36h" or "2d"`);
      source.maxAgeMs = ms;
    }
    if (s.widen_ipv6 !== undefined) {
      if (!isFlagKind(kind) || !Number.isInteger(s.widen_ipv6) || !((s.widen_ipv6 as number) >= 32 && (s.widen_ipv6 as number) <= 128)) {
        fail(file, `${where}.widen_ipv6 must be a prefix length from 32 to 128, on a flag kind`);
      }
      source.widen_ipv6 = s.widen_ipv6 as number;
    }
    if (s.dns_servers !== undefined) {
      if (format !== 'surfshark-clusters' || !Array.isArray(s.dns_servers) || !s.dns_servers.every((d) => typeof d === 'string')) {
        fail(file, `${where}.dns_servers must be a list of addresses, on a source of host names (surfshark-clusters)`);
      }
      source.dns_servers = s.dns_servers as string[];
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
