/**
 * A server worker thread: one uWebSockets.js app listening on the shared
 * port (the kernel spreads connections over the workers' sockets), answering
 * the API (/v1) and the customer dashboard (/dashboard) from the process-wide
 * snapshot mapping, the shared limit table and the account store.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { mountDashboard, type DashboardOptions } from '../dashboard/routes.js';
import { openSnapshot } from '../snapshot.js';
import { AccountStore } from '../store/accounts.js';
import { LmdbCustomerStore } from '../store/lmdb.js';
import { RedisCustomerStore } from '../store/redis.js';
import { SharedClock, systemClock } from '../clock.js';
import { mountApi } from './api.js';
import { LeaseTable, type SharedLeaseState } from './leases.js';
import { Limits, type SharedLimitState } from './limits.js';
import { createAccessLog, createLogger } from '../log.js';
import { WorkerMetrics } from './metrics.js';
import { loadPlans } from '../plans.js';
import { loadUws } from './uws.js';

export interface WorkerData {
  index: number;
  dataDir: string;
  host: string;
  port: number;
  limitState: SharedLimitState;
  /** The node's leases of a shared store's limits (leases.ts); null: its own counters limit keys. */
  leaseState: SharedLeaseState | null;
  /**
   * The shared store's URL (null: the data folder's own store): the request
   * path then reads the node's replica of it, the dashboard reads and writes it.
   */
  storeUrl: string | null;
  /** Set when the server runs on a test clock. */
  clock: SharedArrayBuffer | null;
  unkeyedPerSecond: number;
  openapi: string;
  dashboard: DashboardOptions;
  /** The request counters of every worker (metrics.ts). */
  metrics: SharedArrayBuffer;
  /** The access log file, when requests are logged. */
  accessLog: string | null;
}

/** Messages from the main thread. */
export type ToWorker = { type: 'drain' };
/** Messages to the main thread. */
export type FromWorker = { type: 'listening'; port: number } | { type: 'failed'; message: string; portTaken: boolean } | { type: 'drained' };

const data = workerData as WorkerData;
const port = parentPort!;
const post = (m: FromWorker) => port.postMessage(m);
/** Reports why this worker cannot serve and lets its thread end: it holds no socket, and the main thread will not ask it to drain. */
const fail = (message: string, portTaken: boolean) => {
  post({ type: 'failed', message, portTaken });
  port.close();
};
const log = createLogger({ worker: data.index });

try {
  const uws = loadUws();
  const snapshot = openSnapshot(data.dataDir);
  const store = new AccountStore(data.dataDir, undefined, data.storeUrl === null ? 'accounts' : 'replica');
  const limits = new Limits(data.limitState);
  let draining = false;
  const inflight = { count: 0 };
  const accessLog = data.accessLog === null ? null : createAccessLog(data.accessLog, data.index);
  const shared = {
    snapshot,
    store,
    limits,
    plans: loadPlans(),
    clock: data.clock ? new SharedClock(data.clock) : systemClock,
    draining: () => draining,
    inflight,
    trustProxy: data.dashboard.trustProxy,
  };
  const app = uws.App();
  mountApi(app, {
    ...shared,
    keyLimits: data.leaseState === null ? limits : new LeaseTable(data.leaseState),
    openapi: data.openapi,
    unkeyedPerSecond: data.unkeyedPerSecond,
    metrics: new WorkerMetrics(data.metrics, data.index),
    accessLog,
    worker: data.index,
    onError: (error, route, req) => log.error({ req, route, err: error }, 'request failed'),
  });
  // The dashboard reads and writes where the customers live: never the replica (a copy the stream rewrites).
  const customers = data.storeUrl === null ? new LmdbCustomerStore(store, limits) : await RedisCustomerStore.open(data.storeUrl);
  mountDashboard(app, { ...shared, ...data.dashboard, log, store: customers });
  let listenSocket: unknown = null;
  port.on('message', (message: ToWorker) => {
    if (message.type !== 'drain' || draining) return;
    draining = true;
    if (listenSocket) uws.us_listen_socket_close(listenSocket as never);
    // Requests already accepted are answered, with Connection: close. Then
    // the thread ends by itself once uWS has no socket left (idle keep-alive
    // connections time out after 10 s): a worker terminated while uWS holds
    // a socket aborts the whole process (uv_loop_close with open handles).
    const waitForInflight = () => {
      if (inflight.count > 0) {
        setTimeout(waitForInflight, 5);
        return;
      }
      // The snapshot and store stay open: a keep-alive connection may still
      // bring a request (answered, then closed). They are released with the
      // thread; but a connection to Redis would keep the thread alive: closed
      // now (a late dashboard request gets store_unavailable).
      post({ type: 'drained' });
      port.unref();
      if (data.storeUrl !== null) void customers.close();
    };
    waitForInflight();
  });
  app.listen(data.host, data.port, (token) => {
    if (!token) {
      fail(`cannot listen on ${data.host}:${data.port}`, true);
      return;
    }
    listenSocket = token;
    post({ type: 'listening', port: uws.us_socket_local_port(token) });
  });
} catch (error) {
  fail(error instanceof Error ? error.message : String(error), false);
}
