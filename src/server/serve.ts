/**
 * `ipr serve`: the main thread of a server. It opens the published snapshot
 * (and watches for newer ones: the mapping is per process, so every worker
 * moves with it), creates the shared limit table, loads the day's usage,
 * starts the worker threads on one port, persists usage every second, and on
 * close drains the workers, flushes, and returns. Optionally it also runs
 * scheduled updates (updater.ts) and the admin port (admin.ts).
 */
import { readFileSync, unwatchFile, watchFile } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import { Worker } from 'node:worker_threads';
import { IprError } from '../errors.js';
import { openSnapshot } from '../snapshot.js';
import { AccountStore } from '../store/accounts.js';
import { privateFile } from '../private-files.js';
import type { AdminServer, OperationsMetrics } from './admin.js';
import { parseClockText, SharedClock, systemClock, type Clock } from '../clock.js';
import { createLimitState, Limits } from './limits.js';
import { createLogger, type Logger } from '../log.js';
import { openapiDocument } from './openapi.js';
import { createMetricsBuffer, MetricsReader } from './metrics.js';
import { loadPlans } from '../plans.js';
import { followSnapshots, type SnapshotFollower } from '../pipeline/distribute.js';
import { DEFAULT_STORE_MAX_STALE_MS, SharedStoreNode } from './shared-store.js';
import { ScheduledUpdates } from './updater.js';
import { UsageRecorder } from './usage.js';
import { loadUws } from './uws.js';
import type { FromWorker, WorkerData } from './worker.js';

export interface ServeOptions {
  dataDir: string;
  port: number;
  host?: string;
  /** Worker threads (default: one per core). */
  workers?: number;
  /** Test clock: a file holding Unix milliseconds or an ISO date (see src/clock.ts). */
  clockFile?: string;
  /**
   * Size of the shared limit table: how many active keys the data folder may
   * hold. Remembered in the account store (the CLI refuses keys past it); by
   * default the size remembered, else 2^20.
   */
  maxKeys?: number;
  /** Requests per second per client address without a valid key (docs/API.md "Limits": 20). */
  unkeyedPerSecond?: number;
  /** How often to look for a newly published snapshot, ms. */
  watchMs?: number;
  /** Let anyone make an account in the dashboard (default: only the operator, with `ipr accounts create`). */
  signup?: boolean;
  /** Behind a reverse proxy: trust its X-Forwarded-Proto, -For and -Host headers in the dashboard. */
  trustProxy?: boolean;
  /** Sign-ups the dashboard takes in 24 hours, from everyone together (default 1,000). */
  signupsPerDay?: number;
  /** Keys the dashboard makes in 24 hours, for every account together (default 10,000). */
  keysPerDay?: number;
  /** Run `ipr update` with this sources configuration every intervalMs, in a child process. */
  update?: { sources: string; intervalMs: number; keep?: number };
  /** Serve /metrics and /provenance on this port (default host 127.0.0.1; any other needs a token). */
  admin?: { port: number; host?: string; token: string | null };
  /** Append a JSON line per request to this file. */
  accessLog?: string;
  /** The customers' shared store (`redis://...`, shared-store.ts); absent: the data folder's own. */
  store?: string;
  /** With a shared store: how long keys are answered while it cannot be reached, ms (then 503). */
  storeMaxStaleMs?: number;
  /**
   * With a shared store and scheduled updates: this node is the builder. Its
   * updates take the builder lock and announce each published snapshot, to be
   * downloaded from this base URL (its admin port, which serves the files).
   */
  announce?: string;
  /** With a shared store: fetch, verify and publish the snapshots the builder announces (docs/DEPLOY.md "Many nodes"). */
  follow?: boolean;
  log?: Logger;
}

export interface RunningServer {
  host: string;
  port: number;
  workers: number;
  /** Where the admin port listens, when there is one. */
  admin: { host: string; port: number } | null;
  /** Stops accepting, answers what is in flight, flushes usage; resolves when done. */
  close(): Promise<void>;
}

const USAGE_FLUSH_MS = 1000;
export const DEFAULT_SIGNUPS_PER_DAY = 1000;
export const DEFAULT_KEYS_PER_DAY = 10_000;
/** Often enough that no request counter wraps twice between two reads (metrics.ts). */
const METRICS_FOLD_MS = 60_000;
/** Answers in flight plus uWS's 10 s idle timeout for keep-alive connections, with room. */
const DRAIN_TIMEOUT_MS = 30_000;

/** A free port, for --port 0: uSockets shares a port between workers (SO_REUSEPORT) only when it is named. */
function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.once('error', reject);
    probe.listen(0, host, () => {
      const { port } = probe.address() as net.AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}

const FREE_PORT_ATTEMPTS = 5;

class WorkerFailed extends IprError {
  constructor(
    message: string,
    /** The worker could not listen: the port was taken. */
    readonly portTaken: boolean,
  ) {
    super('server_failed', message);
  }
}

/** Asks a worker to drain and waits until its thread has ended (never terminate(): see worker.ts). */
function drain(worker: Worker, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    if (worker.threadId === -1) {
      resolve(true);
      return;
    }
    const timer = setTimeout(() => resolve(false), timeoutMs);
    worker.once('exit', () => {
      clearTimeout(timer);
      resolve(true);
    });
    worker.postMessage({ type: 'drain' });
  });
}

export async function serve(options: ServeOptions): Promise<RunningServer> {
  const log = options.log ?? createLogger({ role: 'main' });
  const host = options.host ?? '0.0.0.0';
  const workerCount = options.workers ?? os.availableParallelism();
  if (!(Number.isInteger(workerCount) && workerCount >= 1)) throw new IprError('invalid_argument', '--workers takes a whole number from 1');
  loadUws(); // fail here, before anything starts, when only the fallback would load

  const metricsBuffer = createMetricsBuffer(workerCount);
  let operations: OperationsMetrics | null = null;
  const snapshot = openSnapshot(options.dataDir, {
    watch: options.watchMs ?? 250,
    onRefreshError: (error) => {
      const damaged = error.code === 'snapshot_damaged';
      operations?.snapshotProblem(damaged ? 'damaged' : 'refused');
      if (damaged) log.error({ err: error }, 'the snapshot being served was changed on disk; still serving it');
      else log.error({ err: error }, 'a newly published snapshot was refused; still serving the previous one');
    },
    onSwap: () => {
      operations?.snapshotSwapped();
      const info = snapshot.info();
      log.info({ event: 'snapshot', path: info.path, built_at: info.built_at }, 'serving a newly published snapshot');
    },
  });
  const fileModes = (message: string) => log.warn({ event: 'file_mode' }, message);
  if ((options.announce !== undefined || options.follow) && options.store === undefined) throw new IprError('invalid_argument', '--announce and --follow need --store');
  if (options.announce !== undefined && (options.update === undefined || options.admin === undefined)) {
    throw new IprError('invalid_argument', '--announce needs --update-interval (the builder updates) and --admin-port (followers download from it)');
  }
  const plans = loadPlans();
  let shared: SharedStoreNode | null = null;
  try {
    if (options.store !== undefined) {
      const maxStaleMs = options.storeMaxStaleMs ?? DEFAULT_STORE_MAX_STALE_MS;
      shared = await SharedStoreNode.open(options.store, options.dataDir, plans, { maxStaleMs, log, ...(options.maxKeys === undefined ? {} : { maxKeys: options.maxKeys }) });
    }
  } catch (error) {
    snapshot.close();
    throw error;
  }
  // With a shared store, the request path reads the node's replica of it; limits come from leases, and usage goes to Redis with them.
  const store = shared?.replica ?? new AccountStore(options.dataDir, fileModes);
  if (options.accessLog !== undefined) privateFile(options.accessLog, fileModes);
  const openapi = JSON.stringify(openapiDocument(plans));

  let clock: Clock = systemClock;
  let sharedClock: SharedClock | null = null;
  if (options.clockFile !== undefined) {
    const file = options.clockFile;
    sharedClock = new SharedClock();
    const read = () => {
      try {
        const ms = parseClockText(readFileSync(file, 'utf8'));
        if (ms !== null) sharedClock!.set(ms);
      } catch {
        // absent or being rewritten: keep the last time
      }
    };
    read();
    if (sharedClock.now() === 0) throw new IprError('invalid_argument', `--clock ${file}: no time in it (Unix milliseconds or an ISO date)`);
    watchFile(file, { interval: 20 }, read);
    clock = sharedClock;
  }

  if (shared === null && options.maxKeys !== undefined) store.setKeySlots(options.maxKeys);
  const limitState = createLimitState(shared === null ? store.keySlots() : 1);
  const usage = shared === null ? new UsageRecorder(store, new Limits(limitState), clock) : null;
  usage?.load();
  let follower: SnapshotFollower | null = null;
  const closeStore = async () => {
    await follower?.close();
    await (shared?.close() ?? store.close());
  };

  const workers: Worker[] = [];
  const start = (index: number, port: number) =>
    new Promise<{ worker: Worker; port: number }>((resolve, reject) => {
      const data: WorkerData = {
        index,
        dataDir: options.dataDir,
        host,
        port,
        limitState,
        leaseState: shared?.leaseState ?? null,
        storeUrl: shared === null ? null : options.store!,
        clock: sharedClock?.buffer ?? null,
        unkeyedPerSecond: options.unkeyedPerSecond ?? 20,
        openapi,
        dashboard: {
          signup: options.signup ?? false,
          trustProxy: options.trustProxy ?? false,
          signupsPerDay: options.signupsPerDay ?? DEFAULT_SIGNUPS_PER_DAY,
          keysPerDay: options.keysPerDay ?? DEFAULT_KEYS_PER_DAY,
        },
        metrics: metricsBuffer,
        accessLog: options.accessLog ?? null,
      };
      const worker = new Worker(new URL('./worker.js', import.meta.url), { workerData: data });
      const onMessage = (m: FromWorker) => {
        if (m.type === 'listening') resolve({ worker, port: m.port });
        if (m.type === 'failed') reject(new WorkerFailed(`worker ${index}: ${m.message}`, m.portTaken));
      };
      worker.on('message', onMessage);
      worker.once('error', (error) => reject(new IprError('server_failed', `worker ${index}: ${error.message}`)));
    });

  // The probed port is free only until it is closed: any process may take it
  // (an outgoing connection's ephemeral port, another server) before the first
  // worker listens on it, so probe again a few times before giving up.
  const startOnFreePort = async (): Promise<Worker> => {
    for (let attempt = 1; ; attempt++) {
      port = await freePort(host);
      try {
        return (await start(0, port)).worker;
      } catch (error) {
        if (!(error instanceof WorkerFailed && error.portTaken) || attempt === FREE_PORT_ATTEMPTS) throw error;
      }
    }
  };

  const updates =
    options.update === undefined
      ? null
      : new ScheduledUpdates({
          dataDir: options.dataDir,
          ...options.update,
          builtAt: new Date(snapshot.info().built_at),
          ...(options.announce === undefined ? {} : { extraArgs: ['--store', options.store!, '--announce', options.announce] }),
          log,
          onFinished: (run) => operations?.updateFinished(run),
        });
  let admin: AdminServer | null = null;
  let foldTimer: NodeJS.Timeout | undefined;
  let port = options.port;
  try {
    if (options.admin !== undefined) {
      // Loaded here: prom-client is for servers with an admin port, not every ipr command.
      const { OperationsMetrics, provenance, startAdmin } = await import('./admin.js');
      const reader = new MetricsReader(metricsBuffer);
      operations = new OperationsMetrics(reader, snapshot, store, shared === null ? null : () => shared!.status());
      foldTimer = setInterval(() => reader.fold(), METRICS_FOLD_MS);
      admin = await startAdmin({
        host: options.admin.host ?? '127.0.0.1',
        port: options.admin.port,
        token: options.admin.token,
        metrics: operations,
        provenance: () => provenance(snapshot, updates?.status() ?? null),
        ...(options.announce === undefined ? {} : { snapshotsOf: options.dataDir }),
      });
    }
    workers.push(options.port === 0 ? await startOnFreePort() : (await start(0, port)).worker);
    for (let i = 1; i < workerCount; i++) workers.push((await start(i, port)).worker);
    if (options.follow) {
      // A fetched snapshot is published into the data folder; the watch above swaps it in.
      follower = await followSnapshots(shared!.redis.connection, options.dataDir, {
        token: options.admin?.token ?? null,
        onOutcome: (o) => {
          if (o.result === 'refused') log.error({ event: 'snapshot', name: o.name, reason: o.reason }, 'an announced snapshot was refused; still serving the last good one');
          else if (o.result === 'published') log.info({ event: 'snapshot', name: o.name }, 'fetched and published the announced snapshot');
        },
        onError: (error) => log.warn({ err: error }, 'following the snapshot announcements failed; following them again'),
      });
    }
  } catch (error) {
    await updates?.close();
    await admin?.close();
    clearInterval(foldTimer);
    await Promise.all(workers.map((w) => drain(w, DRAIN_TIMEOUT_MS)));
    snapshot.close();
    await closeStore();
    if (sharedClock) unwatchFile(options.clockFile!);
    throw error;
  }

  // A handler never lets an error escape, but should a worker die anyway,
  // log it and put a new one on the port.
  const watchWorker = (worker: Worker, index: number) => {
    worker.once('exit', (code) => {
      if (closing !== null) return;
      log.error({ worker: index, code }, 'worker exited; starting another');
      start(index, port).then(
        ({ worker: next }) => {
          workers[index] = next;
          watchWorker(next, index);
        },
        (error: Error) => log.error({ err: error }, 'could not restart a worker'),
      );
    });
  };
  workers.forEach(watchWorker);

  const flush = (final = false) => {
    try {
      usage?.flush(final);
    } catch (error) {
      log.error({ err: error }, 'usage flush failed');
    }
  };
  const flushTimer = setInterval(flush, USAGE_FLUSH_MS);

  let closing: Promise<void> | null = null;
  const close = () => {
    closing ??= (async () => {
      await updates?.close();
      await admin?.close();
      clearInterval(foldTimer);
      const ended = await Promise.all(workers.map((w) => drain(w, DRAIN_TIMEOUT_MS)));
      if (ended.includes(false)) log.error('a worker still had connections after the drain timeout');
      clearInterval(flushTimer);
      flush(true);
      if (sharedClock) unwatchFile(options.clockFile!);
      snapshot.close();
      await closeStore();
    })();
    return closing;
  };
  return { host, port, workers: workerCount, admin: admin && { host: admin.host, port: admin.port }, close };
}
