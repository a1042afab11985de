/**
 * Real Redis for the tests: Debian's `redis-server` started on free loopback
 * ports in the test's own folder, a three-master Redis Cluster made with
 * `redis-cli --cluster create`, a TCP relay that adds latency to a
 * connection or stalls it, and simulated nodes keeping limit leases. Everything a test starts is stopped by its
 * teardown; every wait is bounded.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import type { Test } from 'tap';
import { root, testDir } from './helpers.js';

export const REDIS_SERVER = '/usr/bin/redis-server';
export const REDIS_CLI = '/usr/bin/redis-cli';

const START_TIMEOUT_MS = 10_000;

/** A port nothing listens on now (and, for a cluster node, whose bus port, +10000, is free too). */
async function freePort(withBus = false): Promise<number> {
  for (;;) {
    const port = await listenOnce(0);
    if (port + 10_000 > 65_535 && withBus) continue;
    if (!withBus) return port;
    try {
      await listenOnce(port + 10_000);
      return port;
    } catch {
      // the bus port is taken: try another
    }
  }
}

function listenOnce(port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.once('error', reject);
    probe.listen(port, '127.0.0.1', () => {
      const { port: bound } = probe.address() as net.AddressInfo;
      probe.close(() => resolve(bound));
    });
  });
}

/** Sends one inline command over a fresh connection and resolves the raw reply (bounded in time). */
export function rawCommand(port: number, command: string, timeoutMs = 1000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    let reply = '';
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`redis on ${port}: no answer to ${command} within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.on('connect', () => socket.write(`${command}\r\n`));
    socket.on('data', (d) => {
      reply += d;
      if (reply.endsWith('\r\n')) {
        clearTimeout(timer);
        socket.end();
        resolve(reply);
      }
    });
    socket.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
  });
}

export interface RedisServer {
  port: number;
  /** redis://127.0.0.1:<port> */
  url: string;
  dir: string;
  process: ChildProcess;
  /** SIGSTOP: the server holds its connections and answers nothing. */
  pause(): void;
  /** SIGCONT after pause(). */
  resume(): void;
  /** SIGKILL (nothing saved beyond the append-only file), then wait for the exit. */
  kill(): Promise<void>;
  /** Starts it again on the same port and folder (after kill() or stop()), with what its append-only file holds. */
  restart(): Promise<void>;
  /** SIGTERM (it saves), then wait for the exit. */
  stop(): Promise<void>;
}

export interface RedisOptions {
  /** Folder name inside the test's folder. */
  name?: string;
  /** Extra redis-server arguments, e.g. ['--cluster-enabled', 'yes']. */
  args?: string[];
  port?: number;
}

/**
 * Starts redis-server on 127.0.0.1 (a free port unless given) with its
 * files in the test's folder, persistent through an append-only file fsynced
 * on every write (so kill() then restart() keeps everything), and waits until
 * it answers PING.
 */
export async function startRedis(t: Test, options: RedisOptions = {}): Promise<RedisServer> {
  const dir = path.join(testDir(t), options.name ?? 'redis');
  mkdirSync(dir, { recursive: true });
  const cluster = options.args?.includes('--cluster-enabled') ?? false;
  let port = options.port ?? (await freePort(cluster));
  let child: ChildProcess;
  let exited: Promise<void>;
  let output = '';

  const launch = async () => {
    output = '';
    child = spawn(
      REDIS_SERVER,
      ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--appendonly', 'yes', '--appendfsync', 'always', '--daemonize', 'no', '--protected-mode', 'no', ...(options.args ?? [])],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    child.stdout!.on('data', (d) => (output += d));
    child.stderr!.on('data', (d) => (output += d));
    exited = new Promise((resolve) => child.once('exit', () => resolve()));
    const deadline = Date.now() + START_TIMEOUT_MS;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`redis-server on ${port} exited:\n${output}`);
      try {
        if ((await rawCommand(port, 'PING', 200)).startsWith('+PONG')) return;
      } catch {
        // not listening yet
      }
      if (Date.now() > deadline) {
        child.kill('SIGKILL');
        throw new Error(`redis-server on ${port} did not answer within ${START_TIMEOUT_MS} ms:\n${output}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  };
  await launch();
  const server: RedisServer = {
    get port() {
      return port;
    },
    url: `redis://127.0.0.1:${port}`,
    dir,
    get process() {
      return child;
    },
    pause: () => child.kill('SIGSTOP'),
    resume: () => child.kill('SIGCONT'),
    async kill() {
      child.kill('SIGCONT');
      child.kill('SIGKILL');
      await exited;
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGCONT');
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    },
    async restart() {
      await launch();
    },
  };
  t.teardown(() => server.stop());
  return server;
}

export interface RedisCluster {
  nodes: RedisServer[];
  /** redis+cluster://127.0.0.1:<p1>,127.0.0.1:<p2>,... */
  url: string;
}

/**
 * Three masters on loopback made into a Redis Cluster by
 * `redis-cli --cluster create` (no replicas), once every node reports
 * cluster_state:ok.
 */
export async function startRedisCluster(t: Test): Promise<RedisCluster> {
  const nodes: RedisServer[] = [];
  for (let i = 0; i < 3; i++) {
    nodes.push(await startRedis(t, { name: `cluster-${i}`, args: ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '2000'] }));
  }
  const made = spawnSync(REDIS_CLI, ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', '0', '--cluster-yes'], {
    encoding: 'utf8',
    timeout: 30_000,
  });
  if (made.status !== 0) throw new Error(`redis-cli --cluster create failed:\n${made.stdout}\n${made.stderr}`);
  const deadline = Date.now() + START_TIMEOUT_MS;
  for (const node of nodes) {
    while (!(await rawCommand(node.port, 'CLUSTER INFO')).includes('cluster_state:ok')) {
      if (Date.now() > deadline) throw new Error(`cluster node ${node.port} not ok within ${START_TIMEOUT_MS} ms`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
  return { nodes, url: `redis+cluster://${nodes.map((n) => `127.0.0.1:${n.port}`).join(',')}` };
}

export interface Relay {
  port: number;
  /** redis://127.0.0.1:<relay port> */
  url: string;
  /** Every chunk, each way, is held this long before it is passed on. */
  setLatency(ms: number): void;
  /** Holds everything, each way, until resume(): the connection looks alive and answers nothing. */
  stall(): void;
  resume(): void;
  close(): Promise<void>;
}

/**
 * A TCP relay on a free loopback port to `targetPort`, which can add latency
 * to every chunk or hold all traffic: a slow or stalled network between a
 * node and Redis, without touching either.
 */
export async function startRelay(t: Test, targetPort: number): Promise<Relay> {
  let latency = 0;
  let stalled = false;
  const held: (() => void)[] = [];
  const sockets = new Set<net.Socket>();
  const pass = (to: net.Socket, chunk: Buffer) => {
    const send = () => {
      if (!to.destroyed) to.write(chunk);
    };
    const go = () => (latency > 0 ? setTimeout(send, latency) : send());
    if (stalled) held.push(go);
    else go();
  };
  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => undefined);
      s.on('close', () => {
        sockets.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
    client.on('data', (chunk: Buffer) => pass(upstream, chunk));
    upstream.on('data', (chunk: Buffer) => pass(client, chunk));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  const relay: Relay = {
    port,
    url: `redis://127.0.0.1:${port}`,
    setLatency: (ms) => {
      latency = ms;
    },
    stall: () => {
      stalled = true;
    },
    resume: () => {
      stalled = false;
      for (const go of held.splice(0)) go();
    },
    close: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
  t.teardown(() => relay.close());
  return relay;
}

export interface LeasePlan {
  name: string;
  requestsPerDay: number | null;
  requestsPerSecond: number;
}

export interface LeaseNodeOptions {
  url: string;
  keys: { id: number; account: string; plan: LeasePlan }[];
  ms: number;
  holdMs?: number;
  rate?: number;
  record?: boolean;
  workers?: number;
  idleReturnMs?: number;
}

export interface NodeResult {
  node: string;
  admitted: number[];
  refused: { day: number; second: number; pending: number; revoked: number };
  times: number[][];
  calls: number;
  heldAtEnd: number[];
  errors: string[];
}

/**
 * Simulated nodes (bench/lease-node.js), one process per options: a real
 * LeaseManager and worker threads admitting from its table. Starts them all
 * at once, runs `during` meanwhile; resolves their results.
 */
export async function runLeaseNodes(t: Test, nodes: LeaseNodeOptions[], during: () => Promise<void> = async () => undefined): Promise<NodeResult[]> {
  const children = nodes.map((options) => {
    const child = spawn(process.execPath, [path.join(root, 'bench', 'lease-node.js'), JSON.stringify(options)], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    t.teardown(() => {
      if (child.exitCode === null) child.kill('SIGKILL');
    });
    const ready = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`node not ready:\n${err}`)), 20_000);
      child.stdout.on('data', () => {
        if (out.startsWith('ready\n')) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
    const done = new Promise<NodeResult>((resolve, reject) => {
      child.once('exit', (code) => (code === 0 ? resolve(JSON.parse(out.split('\n')[1]!) as NodeResult) : reject(new Error(`node exited ${code}:\n${err}`))));
    });
    return { child, ready, done };
  });
  await Promise.all(children.map((c) => c.ready));
  for (const c of children) c.child.stdin.write('go\n');
  const [results] = await Promise.all([Promise.all(children.map((c) => c.done)), during()]);
  return results;
}

