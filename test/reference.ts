/**
 * Plain, obviously-correct readers of the raw data, for the differential
 * tests: address values as BigInt, linear-time parsing, binary search over
 * sorted rows. Slow and simple on purpose.
 */
import { readFileSync } from 'node:fs';
import { packageFile } from './helpers.js';

export function ipValue(ip: string): { v6: boolean; value: bigint } {
  if (!ip.includes(':')) return { v6: false, value: BigInt(ip.split('.').reduce((a, o) => a * 256 + Number(o), 0)) };
  const [head, tail = ''] = ip.split('::');
  const groups = (s: string) => (s === '' ? [] : s.split(':').map((g) => BigInt(`0x${g}`)));
  const h = groups(head!);
  const tl = ip.includes('::') ? groups(tail) : [];
  const all = [...h, ...new Array(8 - h.length - tl.length).fill(0n), ...tl];
  return { v6: true, value: all.reduce((a, g) => (a << 16n) | g, 0n) };
}

/** Special-purpose blocks (mirrors the documented list; native/src/snapshot_writer.cc). */
const SPECIAL_V4 = ['0.0.0.0/8', '10.0.0.0/8', '100.64.0.0/10', '127.0.0.0/8', '169.254.0.0/16', '172.16.0.0/12', '192.0.0.0/24', '192.0.2.0/24', '192.88.99.0/24', '192.168.0.0/16', '198.18.0.0/15', '198.51.100.0/24', '203.0.113.0/24', '224.0.0.0/4', '240.0.0.0/4'];
const SPECIAL_V6 = ['::/96', '::ffff:0:0/96', '64:ff9b:1::/48', '100::/64', '2001:2::/48', '2001:10::/28', '2001:db8::/32', '3fff::/20', '5f00::/16', 'fc00::/7', 'fe80::/10', 'fec0::/10', 'ff00::/8'];
const special = [...SPECIAL_V4.map((p) => [p, false] as const), ...SPECIAL_V6.map((p) => [p, true] as const)].map(([p, v6]) => {
  const [a, len] = p.split('/');
  const width = v6 ? 128n : 32n;
  const base = ipValue(a!).value;
  return { v6, first: base, last: base + (1n << (width - BigInt(len!))) - 1n };
});
export const isSpecial = (v6: boolean, value: bigint) => special.some((s) => s.v6 === v6 && value >= s.first && value <= s.last);

export interface AsnRow {
  first: bigint;
  last: bigint;
  asn: number;
  org: string;
}

export function loadAsnRows(file: string): AsnRow[] {
  return readFileSync(packageFile(`@ip-location-db/asn/${file}`), 'utf8')
    .trim()
    .split('\n')
    .map((line) => {
      const m = /^([0-9]+),([0-9]+),([0-9]+),(.*)$/.exec(line)!;
      const org = m[4]!.startsWith('"') ? m[4]!.slice(1, -1).replace(/""/g, '"') : m[4]!;
      return { first: BigInt(m[1]!), last: BigInt(m[2]!), asn: Number(m[3]), org };
    });
}

/** The row holding `value`: the last row starting at or before it, else the one before (overlap rule 3). */
export function findRow(rows: AsnRow[], value: bigint): AsnRow | null {
  let lo = 0;
  let hi = rows.length - 1;
  let at = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (rows[mid]!.first <= value) {
      at = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  for (const i of [at, at - 1]) if (i >= 0 && rows[i]!.first <= value && value <= rows[i]!.last) return rows[i]!;
  return null;
}

/** The exact prefix of first..last that holds `value`, as "network/len" numbers. */
export function routeOf(row: AsnRow, value: bigint, width: bigint): [bigint, bigint] {
  let first = row.first;
  for (;;) {
    let size = 0n;
    while (size < width && (first & ((1n << (size + 1n)) - 1n)) === 0n && first + (1n << (size + 1n)) - 1n <= row.last) size++;
    const last = first + (1n << size) - 1n;
    if (value <= last) return [first, width - size];
    first = last + 1n;
  }
}

export function text(value: bigint, v6: boolean): string {
  if (!v6) return [24n, 16n, 8n, 0n].map((s) => String((value >> s) & 255n)).join('.');
  const groups = [...Array(8)].map((_, i) => Number((value >> BigInt(112 - 16 * i)) & 0xffffn));
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) [best, bestLen] = [i, j - i];
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (best < 0) return hex.join(':');
  return `${hex.slice(0, best).join(':')}::${hex.slice(best + bestLen).join(':')}`;
}


export type Flag = 'tor' | 'vpn' | 'proxy' | 'relay' | 'hosting';

/** Sorted, merged [first, last] intervals of one family. */
class IntervalSet {
  #firsts: bigint[] = [];
  #lasts: bigint[] = [];
  constructor(intervals: [bigint, bigint][]) {
    intervals.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    for (const [first, last] of intervals) {
      const n = this.#lasts.length;
      if (n > 0 && first <= this.#lasts[n - 1]! + 1n) {
        if (last > this.#lasts[n - 1]!) this.#lasts[n - 1] = last;
      } else {
        this.#firsts.push(first);
        this.#lasts.push(last);
      }
    }
  }
  has(value: bigint): boolean {
    let lo = 0;
    let hi = this.#firsts.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (this.#firsts[mid]! > value) hi = mid - 1;
      else if (this.#lasts[mid]! < value) lo = mid + 1;
      else return true;
    }
    return false;
  }
}

function prefixInterval(text: string): { v6: boolean; interval: [bigint, bigint] } {
  const [address, len] = text.trim().split('/');
  const { v6, value } = ipValue(address!);
  const width = v6 ? 128n : 32n;
  const host = width - BigInt(len ?? width);
  const first = (value >> host) << host;
  return { v6, interval: [first, first + (1n << host) - 1n] };
}

function lines(file: string): string[] {
  return readFileSync(file, 'utf8')
    .split('\n')
    .map((l) => l.replace(/#.*/, '').trim())
    .filter(Boolean);
}

/**
 * Which flags the raw feeds of ../shared/data/feeds give an address:
 * membership in the listed prefixes, or an ASN (from the ASN CSV rows) in
 * an ASN list. The same files sources/feeds.sources.json names.
 */
export class FeedReference {
  readonly #sets = new Map<string, IntervalSet>();
  readonly #asnFlags = new Map<number, Flag[]>();

  constructor(
    feeds: string,
    readonly rows4: AsnRow[],
    readonly rows6: AsnRow[],
  ) {
    const texts: Record<Flag, string[]> = { tor: [], vpn: [], proxy: [], relay: [], hosting: [] };
    texts.tor = lines(`${feeds}/tor/exits.csv`).slice(1).map((l) => l.split(',')[1]!.trim());
    texts.vpn = [...lines(`${feeds}/vpn/ipv4.txt`), ...lines(`${feeds}/vpn/ipv6.txt`)];
    texts.relay = lines(`${feeds}/relay/icloud-private-relay.txt`);
    texts.proxy = lines(`${feeds}/proxy/proxies.txt`).map((l) => l.replace(/^.*:\/\//, '').replace(/:[0-9]+$/, ''));
    for (const p of JSON.parse(readFileSync(`${feeds}/proxy/proxies.json`, 'utf8')) as { host: string; exit_ip: string | null }[]) {
      texts.proxy.push(p.host);
      if (p.exit_ip) texts.proxy.push(p.exit_ip);
    }
    texts.hosting = [...lines(`${feeds}/datacenter/ipv4.txt`), ...lines(`${feeds}/datacenter/ipv6.txt`)];
    for (const provider of ['amazon', 'google', 'microsoft', 'oracle', 'digitalocean', 'linode', 'vultr', 'cloudflare']) {
      for (const family of ['ipv4', 'ipv6']) {
        try {
          texts.hosting.push(...lines(`${feeds}/cloud/${provider}/${family}.txt`));
        } catch {
          // oracle publishes no IPv6 list
        }
      }
    }
    for (const [flag, list] of Object.entries(texts)) {
      const parsed = list.map(prefixInterval);
      this.#sets.set(`${flag}4`, new IntervalSet(parsed.filter((p) => !p.v6).map((p) => p.interval)));
      this.#sets.set(`${flag}6`, new IntervalSet(parsed.filter((p) => p.v6).map((p) => p.interval)));
    }
    for (const [flag, file] of [['vpn', 'vpn/asn.txt'], ['hosting', 'datacenter/asn.txt']] as const) {
      for (const line of lines(`${feeds}/${file}`)) {
        const asn = Number(line.replace(/^AS/i, ''));
        this.#asnFlags.set(asn, [...(this.#asnFlags.get(asn) ?? []), flag]);
      }
    }
  }

  flags(ip: string): Record<Flag, boolean> {
    const { v6, value } = ipValue(ip);
    const out: Record<Flag, boolean> = { tor: false, vpn: false, proxy: false, relay: false, hosting: false };
    if (isSpecial(v6, value)) return out;
    for (const flag of Object.keys(out) as Flag[]) out[flag] = this.#sets.get(`${flag}${v6 ? 6 : 4}`)!.has(value);
    const row = findRow(v6 ? this.rows6 : this.rows4, value);
    for (const flag of (row && this.#asnFlags.get(row.asn)) || []) out[flag] = true;
    return out;
  }
}
