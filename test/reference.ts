/**
 * Plain, obviously-correct readers of the raw data, for the differential
 * tests: address values as BigInt, linear-time parsing, binary search over
 * sorted rows. Slow and simple on purpose.
 */
import { existsSync, readFileSync } from 'node:fs';
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

function prefixInterval(text: string, widenIpv6?: number): { v6: boolean; interval: [bigint, bigint] } {
  const [address, len] = text.trim().split('/');
  const { v6, value } = ipValue(address!);
  const width = v6 ? 128n : 32n;
  const length = v6 && len === undefined && widenIpv6 !== undefined ? BigInt(widenIpv6) : BigInt(len ?? width);
  const host = width - length;
  const first = (value >> host) << host;
  return { v6, interval: [first, first + (1n << host) - 1n] };
}

function lines(file: string): string[] {
  return readFileSync(file, 'utf8')
    .split('\n')
    .map((l) => l.replace(/#.*/, '').trim())
    .filter(Boolean);
}

/** The host of `scheme://host:port` or `host:port`. */
const proxyHost = (line: string) => line.replace(/^.*:\/\//, '').replace(/:[0-9]+$/, '');

/** A listing source of the reference: its flag, its addresses or prefixes as text, its trust. */
interface ListSource {
  flag: Flag;
  texts: string[];
  trust: number;
  widenIpv6?: number;
}

/** An ASN list of the reference. */
interface AsnSource {
  flag: Flag;
  asns: number[];
  trust: number;
}

/** The first field of every CSV row but the header, as numbers (brianhama, OXL: `ASN,Name`). */
const csvAsns = (file: string) =>
  lines(file)
    .slice(1)
    .map((l) => Number(l.split(',')[0]!.replace(/"/g, '')));

/** Every flag source of sources/feeds.sources.json, read plainly. */
function feedSources(feeds: string): { lists: ListSource[]; asnLists: AsnSource[] } {
  const f = (name: string) => `${feeds}/${name}`;
  const lists: ListSource[] = [
    { flag: 'tor', texts: lines(f('tor/exits.csv')).slice(1).map((l) => l.split(',')[1]!.trim()), trust: 1, widenIpv6: 64 },
    { flag: 'tor', texts: lines(f('tor/exit-nodes-2024-02.lst')), trust: 0.5 },
    { flag: 'vpn', texts: [...lines(f('vpn/ipv4.txt')), ...lines(f('vpn/ipv6.txt'))], trust: 1 },
    ...['nordvpn', 'protonvpn', 'mullvad', 'pia', 'surfshark', 'windscribe', 'airvpn', 'ivpn', 'ovpn', 'riseupvpn'].map(
      (provider): ListSource => ({ flag: 'vpn', texts: lines(f(`vpn-providers/${provider}.txt`)), trust: 1 }),
    ),
    {
      flag: 'vpn',
      texts: (['wireguard', 'openvpn'] as const).flatMap((k) =>
        (JSON.parse(readFileSync(f('vpn-providers/ivpn-servers.json'), 'utf8'))[k] as { hosts: { host: string }[] }[]).flatMap((l) => l.hosts.map((h) => h.host)),
      ),
      trust: 1,
    },
    { flag: 'vpn', texts: lines(f('vpn/oxl-risk-db-vpn.txt')), trust: 0.5 },
    { flag: 'hosting', texts: [...lines(f('datacenter/ipv4.txt')), ...lines(f('datacenter/ipv6.txt'))], trust: 1 },
    { flag: 'hosting', texts: lines(f('datacenter/oxl-risk-db-net-hosting.txt')), trust: 0.5 },
    { flag: 'relay', texts: lines(f('relay/icloud-private-relay.txt')), trust: 1 },
    { flag: 'proxy', texts: [...lines(f('proxy/proxies.txt')), ...lines(f('proxy/elliottophellia.txt'))].map(proxyHost), trust: 1 },
    {
      flag: 'proxy',
      texts: (JSON.parse(readFileSync(f('proxy/proxies.json'), 'utf8')) as { host: string; exit_ip: string | null }[]).flatMap((p) =>
        p.exit_ip ? [p.host, p.exit_ip] : [p.host],
      ),
      trust: 1,
    },
    ...['https', 'socks4', 'socks5'].map((p): ListSource => ({ flag: 'proxy', texts: lines(f(`proxy/fyvri/${p}.txt`)).map(proxyHost), trust: 0.5 })),
    { flag: 'proxy', texts: lines(f('proxy/oxl-risk-db-proxy.txt')), trust: 0.5 },
  ];
  for (const provider of ['amazon', 'google', 'microsoft', 'oracle', 'digitalocean', 'linode', 'vultr', 'cloudflare']) {
    for (const family of ['ipv4', 'ipv6']) {
      if (existsSync(f(`cloud/${provider}/${family}.txt`))) lists.push({ flag: 'hosting', texts: lines(f(`cloud/${provider}/${family}.txt`)), trust: 1 });
    }
  }
  const asnLists: AsnSource[] = [
    { flag: 'vpn', asns: lines(f('vpn/asn.txt')).map((l) => Number(l.replace(/^AS/i, ''))), trust: 1 },
    { flag: 'hosting', asns: lines(f('datacenter/asn.txt')).map((l) => Number(l.replace(/^AS/i, ''))), trust: 1 },
    { flag: 'hosting', asns: csvAsns(f('datacenter/brianhama-bad-asn-list.csv')), trust: 0.5 },
    { flag: 'hosting', asns: csvAsns(f('datacenter/oxl-risk-db-asn-hosting.csv')), trust: 0.5 },
    { flag: 'hosting', asns: lines(f('datacenter/umkus-asns_dcs.csv')).map(Number).filter((n) => n !== 0), trust: 0.5 },
  ];
  return { lists, asnLists };
}

/** A network announcing more IPv4 addresses than this is large (src/pipeline/trust.ts, README "Sources"). */
export const LARGE_NETWORK = 2n ** 19n;

/**
 * Which flags the raw feeds of ../shared/data/feeds give an address, as
 * README "Sources" says: a listing of a source of trust 1 counts; listings
 * of weaker sources of the same prefix add their trust up and count at 1,
 * or alone when the ASN holding the prefix's first address announces at
 * most LARGE_NETWORK IPv4 addresses; an ASN named by asn-lists whose trust
 * adds up to 1, or by a weaker one when it is not large, flags every
 * address of that ASN. The same files sources/feeds.sources.json names.
 */
export class FeedReference {
  readonly #sets = new Map<string, IntervalSet>();
  readonly #asnFlags = new Map<number, Flag[]>();
  /** IPv4 addresses per ASN, from the rows. */
  readonly ipv4Sizes = new Map<number, bigint>();

  constructor(
    feeds: string,
    readonly rows4: AsnRow[],
    readonly rows6: AsnRow[],
  ) {
    for (const row of rows4) this.ipv4Sizes.set(row.asn, (this.ipv4Sizes.get(row.asn) ?? 0n) + row.last - row.first + 1n);
    const large = (asn: number | undefined) => asn !== undefined && (this.ipv4Sizes.get(asn) ?? 0n) > LARGE_NETWORK;
    const { lists, asnLists } = feedSources(feeds);
    const intervals = new Map<string, [bigint, bigint][]>();
    const add = (key: string, interval: [bigint, bigint]) => {
      const list = intervals.get(key);
      if (list === undefined) intervals.set(key, [interval]);
      else list.push(interval);
    };
    const weak = new Map<string, { flag: Flag; v6: boolean; interval: [bigint, bigint]; trust: number }>();
    for (const list of lists) {
      const seen = new Set<string>();
      for (const text of list.texts) {
        const { v6, interval } = prefixInterval(text, list.widenIpv6);
        const key = `${list.flag}${v6 ? 6 : 4}`;
        if (list.trust >= 1) {
          add(key, interval);
          continue;
        }
        const id = `${key}/${interval[0]}/${interval[1]}`;
        if (seen.has(id)) continue; // a source lists a prefix once, however many lines name it
        seen.add(id);
        const w = weak.get(id) ?? { flag: list.flag, v6, interval, trust: 0 };
        w.trust += list.trust;
        weak.set(id, w);
      }
    }
    for (const [id, w] of weak) {
      if (w.trust < 1 - 1e-9 && large(findRow(w.v6 ? rows6 : rows4, w.interval[0])?.asn)) continue;
      add(id.slice(0, id.indexOf('/')), w.interval);
    }
    for (const flag of ['tor', 'vpn', 'proxy', 'relay', 'hosting'] as Flag[]) {
      for (const family of [4, 6]) this.#sets.set(`${flag}${family}`, new IntervalSet(intervals.get(`${flag}${family}`) ?? []));
    }
    const asnTrust = new Map<string, number>();
    for (const list of asnLists) {
      for (const asn of new Set(list.asns)) asnTrust.set(`${list.flag}/${asn}`, (asnTrust.get(`${list.flag}/${asn}`) ?? 0) + list.trust);
    }
    for (const [key, trust] of asnTrust) {
      const [flag, asnText] = key.split('/') as [Flag, string];
      const asn = Number(asnText);
      if (trust < 1 - 1e-9 && large(asn)) continue;
      this.#asnFlags.set(asn, [...(this.#asnFlags.get(asn) ?? []), flag]);
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
