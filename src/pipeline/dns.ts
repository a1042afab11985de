/**
 * Host names to addresses, for feeds that list host names instead of
 * addresses (Surfshark's clusters). Names are resolved when a snapshot is
 * built (by `ipr build` or `ipr update`), A and AAAA records, with Node's
 * resolver (c-ares) asking the system's DNS servers or the source's
 * `dns_servers`. DNS being unreachable is not a failure of the build: the
 * names stay unresolved, and the importer warns and leaves them out.
 */
import { promises as dns } from 'node:dns';
import { IprError } from '../errors.js';

/** Codes that say the DNS servers could not be asked, rather than that a name has no address. */
const UNREACHABLE = new Set(['ECONNREFUSED', 'ETIMEOUT', 'ECONNRESET', 'EREFUSED', 'ESERVFAIL', 'ECANCELLED', 'EAI_AGAIN']);
/** Names asked at once. */
const CONCURRENCY = 16;

export interface Resolution {
  /** Each name that resolved, and its addresses (IPv4, then IPv6). */
  addresses: Map<string, string[]>;
  /** Names with no address: unknown to DNS, or not asked. */
  unresolved: string[];
  /** Why DNS could not be asked (the first name's error), when it could not. */
  unreachable: string | null;
}

function resolver(servers: readonly string[] | undefined): dns.Resolver {
  // Short, so that an unreachable server costs seconds, not minutes.
  const r = new dns.Resolver({ timeout: 2000, tries: 2 });
  if (servers !== undefined) {
    try {
      r.setServers(servers);
    } catch (error) {
      throw new IprError('sources_invalid', `dns_servers ${JSON.stringify(servers)}: ${(error as Error).message}`);
    }
  }
  return r;
}

/** A name's addresses; the error code when both lookups failed. */
async function lookup(r: dns.Resolver, name: string): Promise<{ addresses: string[]; code: string | null }> {
  const [v4, v6] = await Promise.allSettled([r.resolve4(name), r.resolve6(name)]);
  const addresses = [...(v4.status === 'fulfilled' ? v4.value : []), ...(v6.status === 'fulfilled' ? v6.value : [])];
  const failed = [v4, v6].find((x): x is PromiseRejectedResult => x.status === 'rejected');
  return { addresses, code: addresses.length === 0 && failed ? ((failed.reason as NodeJS.ErrnoException).code ?? 'EUNKNOWN') : null };
}

/**
 * Resolves `names`. The first name is asked alone: when DNS cannot be
 * reached for it, no other name is asked (each would wait out the timeout).
 */
export async function resolveHosts(names: readonly string[], servers?: readonly string[]): Promise<Resolution> {
  const r = resolver(servers);
  const out: Resolution = { addresses: new Map(), unresolved: [], unreachable: null };
  if (names.length === 0) return out;
  const first = await lookup(r, names[0]!);
  if (first.code !== null && UNREACHABLE.has(first.code)) {
    out.unreachable = `${first.code} asking ${servers?.join(', ') ?? 'the system DNS servers'}`;
    out.unresolved = [...names];
    return out;
  }
  const results: { addresses: string[] }[] = [first];
  for (let at = 1; at < names.length; at += CONCURRENCY) {
    results.push(...(await Promise.all(names.slice(at, at + CONCURRENCY).map((name) => lookup(r, name)))));
  }
  names.forEach((name, i) => {
    if (results[i]!.addresses.length > 0) out.addresses.set(name, results[i]!.addresses);
    else out.unresolved.push(name);
  });
  return out;
}
