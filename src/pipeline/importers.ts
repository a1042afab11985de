/**
 * One importer per source format (sources.ts lists them). Line formats are
 * streamed; a line that does not parse is counted and reported with its file
 * and line number (tally.ts applies the 1% rule). JSON formats are read
 * whole; their "lines" are array entries.
 */
import { createReadStream } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import { IprError } from '../errors.js';
import { NO_RECORD } from '../native.js';
import { TABLE_ID } from '../result.js';
import { resolveHosts } from './dns.js';
import { openMmdb } from './mmdb.js';
import { compareAddresses, integerAddress, parseAddress, parsePrefix, type Family } from '../address.js';
import type { TableSink } from './ranges.js';
import type { Records } from './records.js';
import type { Format, Kind, Source } from './sources.js';
import type { Tally } from './tally.js';

export interface ImportContext {
  source: Source;
  /** The source's index in its configuration (its id in the snapshot's evidence). */
  index: number;
  file: string;
  /** The tables, or the weak listings of a source below trust 1 (trust.ts). */
  sink: TableSink;
  records: Records;
  tally: Tally;
  /** Look host names up (surfshark-clusters); false when a download is only being judged (fetch.ts). */
  resolveNames: boolean;
  /** Fraction of the file done, 0 to 1. */
  progress(fraction: number): void;
  warn(message: string): void;
}

/** Calls `line` for every line of the file but blank ones, with 1-based numbers. */
async function eachLine(ctx: ImportContext, line: (text: string, number: number) => void): Promise<void> {
  const { size } = await stat(ctx.file);
  let done = 0;
  let rest = '';
  let number = 0;
  const stream = createReadStream(ctx.file, { encoding: 'utf8', highWaterMark: 1 << 20 });
  for await (const chunk of stream as AsyncIterable<string>) {
    done += Buffer.byteLength(chunk);
    const text = rest + chunk;
    let start = 0;
    for (let end = text.indexOf('\n'); end >= 0; end = text.indexOf('\n', start)) {
      number++;
      const l = text.slice(start, end).trim();
      if (l !== '') line(l, number);
      start = end + 1;
    }
    rest = text.slice(start);
    ctx.progress(size > 0 ? done / size : 1);
  }
  number++;
  const last = rest.trim();
  if (last !== '') line(last, number);
}

function withoutComment(line: string): string {
  const hash = line.indexOf('#');
  return (hash < 0 ? line : line.slice(0, hash)).trim();
}

/** The value a flag source gives its ranges: its company, if it names one. */
function flagValue(ctx: ImportContext): number {
  return ctx.source.company ? ctx.records.company(ctx.source.company) : NO_RECORD;
}

const first = new Uint8Array(16);
const last = new Uint8Array(16);
const NOT_AN_ADDRESS = 'not an address, CIDR prefix or range';

/**
 * Adds one address, CIDR or `first-last` range to the source's table (a
 * single IPv6 address as its /N when the source sets `widen_ipv6`).
 * Returns a reason when the text is none of those.
 */
function addText(ctx: ImportContext, text: string, value: number): string | null {
  const table = TABLE_ID[ctx.source.kind];
  const dash = text.indexOf('-');
  if (dash > 0) {
    const f1 = parseAddress(text.slice(0, dash).trim(), first);
    const f2 = parseAddress(text.slice(dash + 1).trim(), last);
    if (f1 === 0 || f1 !== f2) return NOT_AN_ADDRESS;
    if (compareAddresses(first, last, f1 === 4 ? 4 : 16) > 0) return 'range ends before it starts';
    ctx.sink.addRange(table, f1, first, last, value);
    return null;
  }
  const prefix = parsePrefix(text, first);
  if (prefix === null) return NOT_AN_ADDRESS;
  const widen = ctx.source.widen_ipv6;
  const len = prefix.family === 6 && prefix.len === 128 && widen !== undefined ? widen : prefix.len;
  ctx.sink.addPrefix(table, prefix.family, prefix.bytes, len, value);
  return null;
}

function record(ctx: ImportContext, reason: string | null, number: number, line: string): void {
  if (reason === null) ctx.tally.records++;
  else ctx.tally.badLine(number, line, reason);
}

async function cidrList(ctx: ImportContext): Promise<void> {
  const value = flagValue(ctx);
  await eachLine(ctx, (line, number) => {
    const text = withoutComment(line);
    if (text !== '') record(ctx, addText(ctx, text, value), number, line);
  });
}

async function torCsv(ctx: ImportContext): Promise<void> {
  const value = flagValue(ctx);
  await eachLine(ctx, (line, number) => {
    if (number === 1 && /^fingerprint\s*,/i.test(line)) return;
    const fields = line.split(',').map((f) => f.trim());
    const address = fields[1]?.replace(/^\[(.*)\]$/, '$1');
    if (fields.length < 2 || address === undefined || address.includes('/') || address.includes('-')) {
      record(ctx, 'expected fingerprint, ipaddr, port', number, line);
      return;
    }
    record(ctx, addText(ctx, address, value), number, line);
  });
}

async function icloudCsv(ctx: ImportContext): Promise<void> {
  const value = flagValue(ctx);
  await eachLine(ctx, (line, number) => {
    if (line.startsWith('#')) return;
    const prefix = line.split(',')[0]!.trim();
    record(ctx, addText(ctx, prefix, value), number, line);
  });
}

/** The host of `scheme://user:pass@host:port`, `host:port`, `[v6]:port` or a bare address. */
export function proxyHost(text: string): string {
  let rest = text.replace(/^[a-z][a-z0-9+.-]*:\/\//i, '');
  const at = rest.lastIndexOf('@');
  if (at >= 0) rest = rest.slice(at + 1);
  rest = rest.replace(/\/.*$/, '');
  if (rest.startsWith('[')) return rest.slice(1, rest.indexOf(']') < 0 ? undefined : rest.indexOf(']'));
  const colons = rest.split(':').length - 1;
  return colons === 1 ? rest.slice(0, rest.indexOf(':')) : rest;
}

async function proxyList(ctx: ImportContext): Promise<void> {
  const value = flagValue(ctx);
  await eachLine(ctx, (line, number) => {
    const text = withoutComment(line);
    if (text === '') return;
    const host = proxyHost(text);
    record(ctx, parseAddress(host) === 0 ? 'not a proxy address' : addText(ctx, host, value), number, line);
  });
}

/** The file as JSON; `cut` takes the JSON part of a text that holds more (PIA's signature). */
async function readJson(ctx: ImportContext, cut: (text: string) => string = (text) => text): Promise<unknown> {
  const text = await readFile(ctx.file, 'utf8');
  ctx.progress(1);
  try {
    return JSON.parse(cut(text));
  } catch (error) {
    throw new IprError('source_unreadable', `source ${ctx.source.name}: ${ctx.file} is not JSON (${(error as Error).message})`);
  }
}

function unreadable(ctx: ImportContext, what: string): never {
  throw new IprError('source_unreadable', `source ${ctx.source.name}: ${ctx.file} ${what}`);
}

/** Adds the address texts of JSON entry `index` (reported as "line" index + 1). */
function addJsonEntry(ctx: ImportContext, index: number, addresses: unknown[], value: number, what: string): void {
  const texts = [...new Set(addresses.filter((a): a is string => typeof a === 'string' && a !== ''))];
  if (texts.length === 0) {
    ctx.tally.badLine(index + 1, JSON.stringify(addresses), `entry without ${what}`);
    return;
  }
  for (const text of texts) record(ctx, addText(ctx, text, value), index + 1, text);
}

async function proxyJson(ctx: ImportContext): Promise<void> {
  const value = flagValue(ctx);
  const doc = await readJson(ctx);
  if (!Array.isArray(doc)) throw new IprError('source_unreadable', `source ${ctx.source.name}: ${ctx.file} is not a JSON array`);
  doc.forEach((entry: { host?: unknown; exit_ip?: unknown } | null, i) => {
    const host = typeof entry?.host === 'string' ? proxyHost(entry.host) : undefined;
    addJsonEntry(ctx, i, [host, entry?.exit_ip], value, 'a host or exit_ip');
  });
}

async function onionoo(ctx: ImportContext): Promise<void> {
  const value = flagValue(ctx);
  const doc = (await readJson(ctx)) as { relays?: unknown };
  if (!Array.isArray(doc?.relays)) throw new IprError('source_unreadable', `source ${ctx.source.name}: ${ctx.file} has no "relays" array`);
  // Asked without the flags field, Onionoo lists every relay alike: exits cannot be told apart.
  if (doc.relays.length > 0 && !doc.relays.some((relay: { flags?: unknown } | null) => Array.isArray(relay?.flags))) {
    unreadable(ctx, 'has no relay flags, so its exits cannot be told from other relays (ask Onionoo for fields=...,flags,exit_addresses)');
  }
  doc.relays.forEach((relay: { flags?: unknown; exit_addresses?: unknown; or_addresses?: unknown } | null, i) => {
    if (!Array.isArray(relay?.flags) || !relay.flags.includes('Exit')) return;
    const exits = Array.isArray(relay.exit_addresses) && relay.exit_addresses.length > 0 ? relay.exit_addresses : null;
    const addresses = exits ?? (Array.isArray(relay.or_addresses) ? relay.or_addresses.map((a) => typeof a === 'string' ? proxyHost(a) : a) : []);
    addJsonEntry(ctx, i, addresses, value, 'addresses');
  });
}

/** A JSON document of prefix lists: each [array name, keys an entry may hold its prefix under]. */
function prefixListJson(lists: [string, string[]][]) {
  return async (ctx: ImportContext): Promise<void> => {
    const value = flagValue(ctx);
    const doc = (await readJson(ctx)) as Record<string, unknown>;
    let index = 0;
    for (const [list, keys] of lists) {
      const entries = doc?.[list];
      if (entries === undefined) continue;
      if (!Array.isArray(entries)) throw new IprError('source_unreadable', `source ${ctx.source.name}: "${list}" is not an array`);
      for (const entry of entries as Record<string, unknown>[]) {
        addJsonEntry(ctx, index++, keys.map((k) => entry?.[k]), value, keys.join(' or '));
      }
    }
  };
}

/**
 * A VPN provider's own server list (JSON): `servers` picks the server
 * entries out of the document and `addresses` the address fields of one;
 * each entry counts as a "line" for the 1% rule. An entry without any
 * address is a bad line.
 */
function serverList(
  what: string,
  servers: (doc: any, ctx: ImportContext) => unknown[],
  addresses: (server: any) => unknown[],
  cut?: (text: string) => string,
) {
  return async (ctx: ImportContext): Promise<void> => {
    const value = flagValue(ctx);
    servers(await readJson(ctx, cut), ctx).forEach((server, i) => addJsonEntry(ctx, i, addresses(server), value, what));
  };
}

/** `doc.key` when it is an array, else the importer's error saying what the document lacks. */
function arrayAt(ctx: ImportContext, doc: any, key: string): unknown[] {
  const list = doc?.[key];
  if (!Array.isArray(list)) unreadable(ctx, `has no "${key}" array`);
  return list;
}

// Mullvad: app/v1/relays groups relays by protocol; www/relays/all is one array.
const mullvadRelays = serverList(
  'ipv4_addr_in or ipv6_addr_in',
  (doc, ctx) => {
    if (Array.isArray(doc)) return doc;
    const groups = ['wireguard', 'openvpn', 'bridge'].filter((k) => Array.isArray(doc?.[k]?.relays));
    if (groups.length === 0) unreadable(ctx, 'has no relays (neither an array nor wireguard/openvpn/bridge.relays)');
    return groups.flatMap((k) => doc[k].relays);
  },
  (relay) => [relay?.ipv4_addr_in, relay?.ipv6_addr_in],
);

const nordvpnServers = serverList(
  'station or ipv6_station',
  (doc, ctx) => (Array.isArray(doc) ? doc : unreadable(ctx, 'is not a JSON array of servers')),
  (server) => [server?.station, server?.ipv6_station],
);

// ExitIP is the address sites see; EntryIP the one clients connect to. Both are Proton's servers.
const protonvpnLogicals = serverList(
  'ExitIP or EntryIP',
  (doc, ctx) => arrayAt(ctx, doc, 'LogicalServers').flatMap((logical: any) => (Array.isArray(logical?.Servers) ? logical.Servers : [])),
  (server) => [server?.ExitIP, server?.EntryIP],
);

// servers/v6 is served as the JSON document, a blank line and a base64 signature of it.
const piaServers = serverList(
  'ip',
  (doc, ctx) =>
    arrayAt(ctx, doc, 'regions').flatMap((region: any) =>
      Object.values(region?.servers ?? {}).flatMap((list) => (Array.isArray(list) ? list : [])),
    ),
  (server) => [server?.ip],
  (text) => text.slice(0, text.lastIndexOf('}') + 1),
);

const ivpnServers = serverList(
  'host',
  (doc, ctx) => {
    const locations = ['wireguard', 'openvpn'].filter((k) => Array.isArray(doc?.[k]));
    if (locations.length === 0) unreadable(ctx, 'has no "wireguard" or "openvpn" array');
    return locations.flatMap((k) => doc[k]).flatMap((location: any) => (Array.isArray(location?.hosts) ? location.hosts : []));
  },
  (host) => [host?.host, host?.ipv6?.host],
);

const AIRVPN_FIELDS = [1, 2, 3, 4].flatMap((n) => [`ip_v4_in${n}`, `ip_v6_in${n}`]);
const airvpnStatus = serverList(
  'ip_v4_in1..4 or ip_v6_in1..4',
  (doc, ctx) => arrayAt(ctx, doc, 'servers'),
  (server) => AIRVPN_FIELDS.map((field) => server?.[field]),
);

const windscribeServerlist = serverList(
  'ip, ip2 or ip3',
  (doc, ctx) =>
    arrayAt(ctx, doc, 'data').flatMap((location: any) =>
      (Array.isArray(location?.groups) ? location.groups : []).flatMap((group: any) => (Array.isArray(group?.nodes) ? group.nodes : [])),
    ),
  (node) => [node?.ip, node?.ip2, node?.ip3],
);

const HOST_NAME = /^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}$/i;

/**
 * Surfshark's clusters name host names (connectionName), not addresses: each
 * is a record, resolved by DNS here (dns.ts). Names that do not resolve
 * (DNS unreachable, or unknown) are left out with a warning; that does not
 * fail the build.
 */
async function surfsharkClusters(ctx: ImportContext): Promise<void> {
  const value = flagValue(ctx);
  const doc = await readJson(ctx);
  if (!Array.isArray(doc)) unreadable(ctx, 'is not a JSON array of clusters');
  const names: string[] = [];
  doc.forEach((cluster: any, i) => {
    const name = cluster?.connectionName;
    if (typeof name === 'string' && HOST_NAME.test(name)) {
      names.push(name.toLowerCase());
      ctx.tally.records++;
    } else {
      ctx.tally.badLine(i + 1, JSON.stringify(name ?? null), 'cluster without a host name (connectionName)');
    }
  });
  if (!ctx.resolveNames) return;
  const resolution = await resolveHosts([...new Set(names)], ctx.source.dns_servers);
  for (const addresses of resolution.addresses.values()) {
    for (const address of addresses) addText(ctx, address, value);
  }
  ctx.tally.unresolved = resolution.unresolved.length;
  if (resolution.unresolved.length > 0) {
    ctx.warn(
      `source ${ctx.source.name}: ${resolution.unresolved.length} of ${resolution.unresolved.length + resolution.addresses.size} host names ` +
        `not resolved (${resolution.unreachable === null ? `unknown to DNS, e.g. ${resolution.unresolved[0]}` : `DNS unreachable: ${resolution.unreachable}`}); ` +
        'their servers are left out of this snapshot',
    );
  }
}

async function asnList(ctx: ImportContext): Promise<void> {
  await eachLine(ctx, (line, number) => {
    const text = withoutComment(line);
    if (text === '') return;
    // `AS123`, `123`, or a CSV row (`123,"Name, CC"`) whose first field is the ASN
    const field = text.includes(',') ? csvFields(text)[0]!.trim() : text;
    const match = /^(?:AS)?([0-9]{1,10})$/i.exec(field);
    if (match === null && number === 1) return; // a CSV header ("ASN,Entity")
    const asn = match ? Number(match[1]) : NaN;
    if (!(asn >= 0 && asn <= 0xffffffff)) {
      ctx.tally.badLine(number, line, 'expected AS<number>');
      return;
    }
    if (asn === 0) {
      ctx.tally.badLine(number, line, 'AS0 is reserved (RFC 7607): no network announces it');
      return;
    }
    ctx.records.flagAsn(asn, ctx.source.kind, ctx.index, ctx.source.trust ?? 1);
    ctx.tally.records++;
  });
}

/** Splits one CSV line (RFC 4180 quoting, no embedded newlines). */
export function csvFields(line: string): string[] {
  const fields: string[] = [];
  let i = 0;
  while (i <= line.length) {
    if (line[i] === '"') {
      let value = '';
      i++;
      while (i < line.length) {
        if (line[i] === '"') {
          if (line[i + 1] === '"') {
            value += '"';
            i += 2;
            continue;
          }
          i++;
          break;
        }
        value += line[i++];
      }
      fields.push(value);
      i = line.indexOf(',', i) < 0 ? line.length + 1 : line.indexOf(',', i) + 1;
    } else {
      const end = line.indexOf(',', i);
      fields.push(line.slice(i, end < 0 ? line.length : end).trim());
      i = end < 0 ? line.length + 1 : end + 1;
    }
  }
  return fields;
}

function csvAddress(text: string, out: Uint8Array): 0 | Family {
  return /^[0-9]+$/.test(text) ? integerAddress(text, out) : parseAddress(text, out);
}

async function asnCsv(ctx: ImportContext): Promise<void> {
  await eachLine(ctx, (line, number) => {
    if (line.startsWith('#')) return;
    const [firstText = '', lastText = '', asnText = '', org = ''] = csvFields(line);
    const f1 = csvAddress(firstText, first);
    const f2 = csvAddress(lastText, last);
    const asn = /^(?:AS)?[0-9]{1,10}$/i.test(asnText) ? Number(asnText.replace(/^AS/i, '')) : NaN;
    let reason: string | null = null;
    if (f1 === 0 || f1 !== f2) reason = 'expected first,last,asn,organisation';
    else if (!(asn <= 0xffffffff)) reason = 'ASN is not a number';
    else if (compareAddresses(first, last, f1 === 4 ? 4 : 16) > 0) reason = 'range ends before it starts';
    if (reason === null) ctx.sink.addRange(TABLE_ID.asn, f1 as Family, first, last, ctx.records.asn(asn, org));
    record(ctx, reason, number, line);
  });
}

/** Location fields of a City-style record: MaxMind/GeoLite2 nesting or ip-location-db's flat form. */
function locationFields(r: Record<string, any>) {
  return {
    country: r.country_code ?? r.country?.iso_code,
    city: typeof r.city === 'string' ? r.city : r.city?.names?.en,
    region: r.state1 ?? r.subdivisions?.[0]?.names?.en ?? r.region,
    latitude: r.latitude ?? r.location?.latitude,
    longitude: r.longitude ?? r.location?.longitude,
  };
}

async function mmdb(ctx: ImportContext): Promise<void> {
  const buffer = await readFile(ctx.file);
  const db = openMmdb(buffer, ctx.file);
  const table = TABLE_ID[ctx.source.kind];
  const values = new Map<number, number>();
  const valueOf = (offset: number): number => {
    let value = values.get(offset);
    if (value === undefined) {
      const r = (db.decode(offset) ?? {}) as Record<string, any>;
      if (ctx.source.kind === 'asn') {
        const number = r.autonomous_system_number ?? r.asn;
        value = typeof number === 'number' ? ctx.records.asn(number, r.autonomous_system_organization ?? r.as_name ?? null) : NO_RECORD;
      } else {
        value = ctx.records.location(locationFields(r));
      }
      values.set(offset, value);
    }
    return value;
  };
  let networks = 0;
  db.walk((family, address, len, offset) => {
    const value = valueOf(offset);
    if (value !== NO_RECORD) {
      ctx.sink.addPrefix(table, family, address, len, value);
      ctx.tally.records++;
    }
    if ((++networks & 0xfffff) === 0) ctx.progress(Math.min(0.99, networks / db.nodeCount));
  });
  ctx.progress(1);
}

export const IMPORTERS: Record<Format, (ctx: ImportContext) => Promise<void>> = {
  'cidr-list': cidrList,
  'tor-csv': torCsv,
  onionoo,
  'icloud-csv': icloudCsv,
  'proxy-list': proxyList,
  'proxy-json': proxyJson,
  'aws-json': prefixListJson([
    ['prefixes', ['ip_prefix']],
    ['ipv6_prefixes', ['ipv6_prefix']],
  ]),
  'google-json': prefixListJson([['prefixes', ['ipv4Prefix', 'ipv6Prefix']]]),
  'asn-list': asnList,
  'mullvad-relays': mullvadRelays,
  'nordvpn-servers': nordvpnServers,
  'protonvpn-logicals': protonvpnLogicals,
  'pia-servers': piaServers,
  'ivpn-servers': ivpnServers,
  'airvpn-status': airvpnStatus,
  'windscribe-serverlist': windscribeServerlist,
  'surfshark-clusters': surfsharkClusters,
  'asn-csv': asnCsv,
  mmdb,
};
