// Seeded address sets drawn from the real data, shared by the benchmarks and
// the differential test so both exercise the same kinds of addresses:
//   - uniform IPv4 over the whole space (special-purpose space included);
//   - addresses inside random lines of the real feeds (VPN, datacenter,
//     relay, Tor, proxies; IPv4 and IPv6);
//   - IPv6 inside random rows of the ASN ranges (where IPv6 data lives).
// IPv6 is written in full, uncompressed form half of the time, so the parser
// and canonical formatting are exercised too.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** The shared real data folder: IPR_SHARED_DATA, else ../shared/data beside the repository. */
export const sharedData = process.env.IPR_SHARED_DATA ?? path.resolve(root, '..', 'shared', 'data');

/** A file of an installed npm data package. */
export function packageFile(spec) {
  return createRequire(path.join(root, 'package.json')).resolve(spec);
}

/** A deterministic 32-bit generator (splitmix32 steps). */
export function random(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x9e3779b9) >>> 0;
    let z = state;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  };
}

function randomBig(next, bits) {
  let v = 0n;
  for (let i = 0; i < bits; i += 32) v = (v << 32n) | BigInt(next());
  return v & ((1n << BigInt(bits)) - 1n);
}

export function v4Text(n) {
  return `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
}

function v6Text(v, full) {
  const groups = [];
  for (let i = 7; i >= 0; i--) groups.push(Number((v >> BigInt(16 * i)) & 0xffffn).toString(16));
  if (full) return groups.map((g) => g.padStart(4, '0')).join(':');
  return groups.join(':');
}

function v6Value(text) {
  const [head, tail = ''] = text.split('::');
  const parse = (s) => (s === '' ? [] : s.split(':').map((g) => BigInt(`0x${g}`)));
  const h = parse(head);
  const t = text.includes('::') ? parse(tail) : [];
  const groups = [...h, ...new Array(8 - h.length - t.length).fill(0n), ...t];
  return groups.reduce((acc, g) => (acc << 16n) | g, 0n);
}

function v4Value(text) {
  return text.split('.').reduce((acc, o) => ((acc << 8) | Number(o)) >>> 0, 0);
}

/** A random address inside "address", "address/len" (IPv4 or IPv6). */
export function inside(prefix, next) {
  const [address, lenText] = prefix.trim().split('/');
  if (address.includes(':')) {
    const len = lenText === undefined ? 128 : Number(lenText);
    const host = 128 - len;
    const base = (v6Value(address) >> BigInt(host)) << BigInt(host);
    return v6Text(base | randomBig(next, host), next() & 1);
  }
  const len = lenText === undefined ? 32 : Number(lenText);
  const mask = len === 0 ? 0 : (0xffffffff << (32 - len)) >>> 0;
  return v4Text(((v4Value(address) & mask) | (next() & ~mask)) >>> 0);
}

function lines(file) {
  return readFileSync(file, 'utf8')
    .split('\n')
    .map((l) => l.replace(/#.*/, '').trim())
    .filter(Boolean);
}

/** Prefixes of every flag feed, for drawing addresses inside them. */
export function feedPrefixes() {
  const feeds = path.join(sharedData, 'feeds');
  const plain = ['vpn/ipv4.txt', 'vpn/ipv6.txt', 'datacenter/ipv4.txt', 'datacenter/ipv6.txt', 'relay/icloud-private-relay.txt'];
  const prefixes = plain.flatMap((f) => lines(path.join(feeds, f)));
  prefixes.push(...lines(path.join(feeds, 'tor/exits.csv')).slice(1).map((l) => l.split(',')[1].trim()));
  prefixes.push(...lines(path.join(feeds, 'proxy/proxies.txt')).map((l) => l.replace(/^.*:\/\//, '').replace(/:[0-9]+$/, '')));
  return prefixes;
}

/** [first, last] BigInt pairs of the IPv6 ASN ranges. */
export function asnV6Ranges() {
  return lines(packageFile('@ip-location-db/asn/asn-ipv6.csv')).map((l) => {
    const [first, last] = l.split(',');
    return [v6Value(first), v6Value(last)];
  });
}

/**
 * `count` addresses: 40% uniform IPv4, 30% inside the feeds, 30% IPv6 inside
 * ASN ranges. The same seed gives the same list.
 */
export function seededAddresses(count, seed = 1) {
  const next = random(seed);
  const feeds = feedPrefixes();
  const v6 = asnV6Ranges();
  const out = new Array(count);
  for (let i = 0; i < count; i++) {
    const pick = next() % 10;
    if (pick < 4) {
      out[i] = v4Text(next());
    } else if (pick < 7) {
      out[i] = inside(feeds[next() % feeds.length], next);
    } else {
      const [first, last] = v6[next() % v6.length];
      out[i] = v6Text(first + (randomBig(next, 128) % (last - first + 1n)), next() & 1);
    }
  }
  return out;
}
