/**
 * The connection to Redis (or Valkey) that the Redis customer store, the
 * lease manager, the change stream and snapshot distribution share: the
 * store URL, node-redis clients for one server or a Cluster, and a time
 * limit on every command.
 *
 * Store URLs (`IPR_STORE`, `--store`):
 *
 *   redis://[user:pass@]host:port[/db][?prefix=P]
 *   rediss://...                                     the same over TLS
 *   redis+cluster://host:port[,host:port...][?prefix=P]   a Redis Cluster (any of its nodes)
 *
 * Credentials in a URL never reach a log or an error message (redactStoreUrl).
 *
 * Time limits: node-redis gives up on a command only while it is waiting to
 * be sent; a command already on a stalled connection (a SIGSTOPped server, a
 * network that holds packets) would wait for ever. So every command here
 * races a timer and fails with IprError `store_unavailable` when it loses;
 * the socket's own idle timeout (with a PING every second) then closes a
 * connection that stopped answering, which fails whatever else was on it,
 * and node-redis reconnects. Commands are never queued while disconnected:
 * they fail at once, the caller decides.
 */
import { createHash } from 'node:crypto';
import { createClient, createCluster, ErrorReply, type RedisClientType, type RedisClusterType } from 'redis';
import { IprError } from '../errors.js';

export interface StoreUrl {
  tls: boolean;
  cluster: boolean;
  nodes: { host: string; port: number }[];
  username: string | null;
  password: string | null;
  database: number;
  /** Every key this service writes starts with it (default `ipr:`). */
  prefix: string;
}

export const DEFAULT_PREFIX = 'ipr:';
/** How long one command may take before the store counts as unavailable for it. */
export const DEFAULT_COMMAND_TIMEOUT_MS = 1000;
/** A connection that received nothing for this long (PINGs go every second) is closed and made again. */
const SOCKET_IDLE_TIMEOUT_MS = 3000;
const PING_INTERVAL_MS = 1000;

function invalid(text: string, why: string): IprError {
  return new IprError('invalid_argument', `store URL ${redactStoreUrl(text)}: ${why} (redis://[user:pass@]host:port[/db], rediss://..., redis+cluster://host:port[,host:port...])`);
}

/** The URL with its password (and a user name given alone) replaced by `***`: what logs and errors may show. */
export function redactStoreUrl(text: string): string {
  return text.replace(/^([a-z+]+:\/\/)([^@/]*)@/i, (_, scheme: string, userinfo: string) => {
    const colon = userinfo.indexOf(':');
    return `${scheme}${colon < 0 ? '***' : `${userinfo.slice(0, colon)}:***`}@`;
  });
}

function parsePort(text: string, port: string): number {
  if (!/^[0-9]{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65_535) throw invalid(text, `"${port}" is not a port`);
  return Number(port);
}

/** Parses a store URL; throws IprError invalid_argument naming what is wrong (without the credentials). */
export function parseStoreUrl(text: string): StoreUrl {
  const match = /^(redis|rediss|redis\+cluster):\/\/(?:([^@/?#]*)@)?([^/?#]*)(\/[^?#]*)?(?:\?([^#]*))?$/.exec(text.trim());
  if (match === null) throw invalid(text, 'not a store URL');
  const [, scheme, userinfo, hostList, dbPath, query] = match as unknown as [string, string, string | undefined, string, string | undefined, string | undefined];
  const cluster = scheme === 'redis+cluster';
  let username: string | null = null;
  let password: string | null = null;
  if (userinfo !== undefined) {
    const colon = userinfo.indexOf(':');
    try {
      username = decodeURIComponent(colon < 0 ? userinfo : userinfo.slice(0, colon)) || null;
      password = colon < 0 ? null : decodeURIComponent(userinfo.slice(colon + 1));
    } catch {
      throw invalid(text, 'the user name or password is not valid percent-encoding');
    }
    // redis://secret@host is the old form: a password without a user.
    if (colon < 0) [username, password] = [null, username];
  }
  const hosts = hostList.split(',');
  if (!cluster && hosts.length > 1) throw invalid(text, 'several hosts need redis+cluster://');
  const nodes = hosts.map((hostPort) => {
    const m = /^(\[[0-9a-fA-F:.]+\]|[^:[\]]+)(?::([^:]*))?$/.exec(hostPort);
    if (m === null || m[1] === undefined) throw invalid(text, `"${hostPort}" is not host:port`);
    return { host: m[1].replace(/^\[|\]$/g, ''), port: m[2] === undefined ? 6379 : parsePort(text, m[2]) };
  });
  let database = 0;
  if (dbPath !== undefined && dbPath !== '/' && dbPath !== '') {
    if (cluster) throw invalid(text, 'a Redis Cluster has only database 0');
    if (!/^\/[0-9]{1,2}$/.test(dbPath)) throw invalid(text, `"${dbPath.slice(1)}" is not a database number`);
    database = Number(dbPath.slice(1));
  }
  let prefix = DEFAULT_PREFIX;
  for (const pair of (query ?? '').split('&').filter((p) => p !== '')) {
    const [name, value] = pair.split('=') as [string, string | undefined];
    if (name !== 'prefix' || value === undefined) throw invalid(text, `unknown option "${name}" (only prefix=...)`);
    prefix = decodeURIComponent(value);
    // A brace would make the prefix a hash tag of its own: every key in one slot.
    if (!/^[A-Za-z0-9_.:-]{1,64}$/.test(prefix)) throw invalid(text, 'a prefix is 1 to 64 of A-Z a-z 0-9 _ . : -');
  }
  return { tls: scheme === 'rediss', cluster, nodes, username, password, database, prefix };
}

/** A Lua script run by EVALSHA (loaded on first NOSCRIPT). All its keys must share a hash slot. */
export class LuaScript {
  readonly sha: string;
  constructor(readonly source: string) {
    this.sha = createHash('sha1').update(source).digest('hex');
  }
}

type Client = RedisClientType | RedisClusterType;

export interface ConnectionOptions {
  commandTimeoutMs?: number;
  /** Shown in CLIENT LIST. */
  name?: string;
}


export class RedisConnection {
  readonly prefix: string;
  readonly cluster: boolean;
  readonly commandTimeoutMs: number;
  /** Whether the last command got an answer (false after a timeout or a connection error). */
  healthy = true;
  readonly #client: Client;
  readonly #url: StoreUrl;
  readonly #options: ConnectionOptions;
  readonly #shown: string;

  private constructor(client: Client, url: StoreUrl, shown: string, options: ConnectionOptions) {
    this.#client = client;
    this.#url = url;
    this.#shown = shown;
    this.#options = options;
    this.prefix = url.prefix;
    this.cluster = url.cluster;
    this.commandTimeoutMs = options.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS;
  }

  /** Connects (within the command time limit, else IprError store_unavailable). */
  static async open(text: string, options: ConnectionOptions = {}): Promise<RedisConnection> {
    const url = parseStoreUrl(text);
    return RedisConnection.#connect(url, redactStoreUrl(text), options);
  }

  static async #connect(url: StoreUrl, shown: string, options: ConnectionOptions): Promise<RedisConnection> {
    const timeout = options.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS;
    const socket = {
      connectTimeout: Math.max(timeout, 1000),
      socketTimeout: SOCKET_IDLE_TIMEOUT_MS,
      // Try again soon, never give up: a store that comes back is used again.
      reconnectStrategy: (retries: number) => Math.min(50 * 2 ** retries, 1000),
      ...(url.tls ? { tls: true as const } : {}),
    };
    const common = {
      // RESP2: replies as flat arrays and strings, the shapes every caller here reads.
      RESP: 2 as const,
      username: url.username ?? undefined,
      password: url.password ?? undefined,
      name: options.name,
      disableOfflineQueue: true,
      pingInterval: PING_INTERVAL_MS,
    };
    const client: Client = url.cluster
      ? (createCluster({
          RESP: 2,
          rootNodes: url.nodes.map((n) => ({ socket: { host: n.host, port: n.port, ...socket } })),
          defaults: { ...common, socket },
        }) as unknown as RedisClusterType)
      : (createClient({ ...common, database: url.database, socket: { host: url.nodes[0]!.host, port: url.nodes[0]!.port, ...socket } }) as unknown as RedisClientType);
    // node-redis reports connection trouble as events; commands fail on their own (and are timed).
    client.on('error', () => undefined);
    const connection = new RedisConnection(client, url, shown, options);
    try {
      await connection.#timed(client.connect() as Promise<unknown>, 'connect');
    } catch (error) {
      void (client.destroy?.() as unknown);
      throw error;
    }
    return connection;
  }

  /** A second connection to the same store (a blocking read must not hold up other commands). */
  duplicate(name?: string): Promise<RedisConnection> {
    return RedisConnection.#connect(this.#url, this.#shown, { ...this.#options, name: name ?? this.#options.name });
  }

  /** A full key name: the prefix, then `name`. */
  key(name: string): string {
    return this.prefix + name;
  }

  #timed<T>(work: Promise<T>, what: string, timeoutMs = this.commandTimeoutMs): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.healthy = false;
        reject(new IprError('store_unavailable', `the store (${this.#shown}) did not answer ${what} within ${timeoutMs} ms`));
      }, timeoutMs);
      work.then(
        (value) => {
          clearTimeout(timer);
          this.healthy = true;
          resolve(value);
        },
        (error: unknown) => {
          clearTimeout(timer);
          if (error instanceof ErrorReply) {
            // Redis answered (an error reply): the store is there.
            this.healthy = true;
            reject(error);
            return;
          }
          this.healthy = false;
          reject(new IprError('store_unavailable', `the store (${this.#shown}) failed ${what}: ${(error as Error).message}`));
        },
      );
    });
  }

  /**
   * Sends one command; `key` (a full key name) routes it on a Cluster.
   * Resolves Redis's reply as node-redis decodes it (RESP2 shapes).
   */
  command<T = unknown>(key: string | undefined, args: (string | number | Buffer)[], timeoutMs?: number): Promise<T> {
    const argv = args.map((a) => (typeof a === 'number' ? String(a) : a));
    const sent = this.cluster
      ? (this.#client as RedisClusterType).sendCommand<T>(key, false, argv)
      : (this.#client as RedisClientType).sendCommand<T>(argv);
    return this.#timed(sent, String(args[0]), timeoutMs);
  }

  /**
   * Every key whose full name matches `pattern` (SCAN, so Redis never blocks
   * on it), on every master of a Cluster. Keys made or removed during the
   * scan may or may not be in the answer.
   */
  async scan(pattern: string): Promise<string[]> {
    const clients: RedisClientType[] = this.cluster
      ? await Promise.all((this.#client as RedisClusterType).masters.map((m) => (this.#client as RedisClusterType).nodeClient(m) as Promise<RedisClientType>))
      : [this.#client as RedisClientType];
    const found: string[] = [];
    for (const client of clients) {
      let cursor = '0';
      do {
        const [next, keys] = await this.#timed(client.sendCommand<[string, string[]]>(['SCAN', cursor, 'MATCH', pattern, 'COUNT', '1000']), 'SCAN');
        found.push(...keys);
        cursor = next;
      } while (cursor !== '0');
    }
    return found;
  }

  /** Runs `script` on `keys` (full names, one hash slot) with `args`. */
  async script<T = unknown>(script: LuaScript, keys: string[], args: (string | number)[]): Promise<T> {
    const tail = [String(keys.length), ...keys, ...args.map(String)];
    try {
      return await this.command<T>(keys[0], ['EVALSHA', script.sha, ...tail]);
    } catch (error) {
      if (!(error instanceof Error && error.message.startsWith('NOSCRIPT'))) throw error;
      return this.command<T>(keys[0], ['EVAL', script.source, ...tail]);
    }
  }

  /** Redis's clock, Unix ms (with µs in the fraction). */
  async time(key?: string): Promise<number> {
    const [s, us] = await this.command<[string, string]>(key, ['TIME']);
    return Number(s) * 1000 + Number(us) / 1000;
  }

  /** Closes at once, failing whatever is still waiting for an answer (a blocking read). */
  destroy(): void {
    this.#client.destroy();
  }

  /** Closes once the commands sent have their answers (within the time limit, else at once). */
  async close(): Promise<void> {
    try {
      await this.#timed(this.#client.close() as Promise<unknown>, 'close');
    } catch {
      this.#client.destroy();
    }
  }
}
