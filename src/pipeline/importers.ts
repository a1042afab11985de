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
import { openMmdb } from './mmdb.js';
import { compareAddresses, integerAddress, parseAddress, parsePrefix, type Family, type RangeSink } from './ranges.js';
import type { Records } from './records.js';
import type { Format, Kind, Source } from './sources.js';
import type { Tally } from './tally.js';

export interface ImportContext {
  source: Source;
  file: string;
  sink: RangeSink;
  records: Records;
  tally: Tally;
  /** Fraction of the file done, 0 to 1. */
  progress(fraction: number): void;
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
 * Adds one address, CIDR or `first-last` range to the source's table.
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
  ctx.sink.addPrefix(table, prefix.family, prefix.bytes, prefix.len, value);
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

async function readJson(ctx: ImportContext): Promise<unknown> {
  const text = await readFile(ctx.file, 'utf8');
  ctx.progress(1);
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new IprError('source_unreadable', `source ${ctx.source.name}: ${ctx.file} is not JSON (${(error as Error).message})`);
  }
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

async function asnList(ctx: ImportContext): Promise<void> {
  await eachLine(ctx, (line, number) => {
    const text = withoutComment(line);
    if (text === '') return;
    const match = /^(?:AS)?([0-9]{1,10})$/i.exec(text);
    const asn = match ? Number(match[1]) : NaN;
    if (!(asn >= 0 && asn <= 0xffffffff)) {
      ctx.tally.badLine(number, line, 'expected AS<number>');
      return;
    }
    ctx.records.flagAsn(asn, ctx.source.kind);
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
  'asn-csv': asnCsv,
  mmdb,
};
