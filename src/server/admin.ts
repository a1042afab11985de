/**
 * The admin port: Prometheus metrics (prom-client) at GET /metrics and the
 * serving snapshot's provenance at GET /provenance, on a small node:http
 * server of the main thread, apart from the API's port and off its workers.
 *
 * It binds 127.0.0.1 unless told otherwise. On any address that is not
 * loopback it refuses to start without a token, and whenever a token is set
 * every request must carry it as `Authorization: Bearer <token>`. Without a
 * token it answers only requests whose Host is a loopback name.
 *
 * Request metrics come from the workers' shared counters (metrics.ts), read
 * at scrape time; snapshot metrics from the main thread's snapshot handle;
 * update metrics from the scheduled updates (updater.ts).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import ipaddr from 'ipaddr.js';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { errorBody, IprError } from '../errors.js';
import { serveSnapshotFile } from '../pipeline/distribute.js';
import type { Snapshot } from '../snapshot.js';
import type { AccountStore } from '../store/accounts.js';
import { LATENCY_BOUNDS_US, LIMITS, ROUTES, STATUSES, type MetricsReader, type MetricsTotals } from './metrics.js';
import type { UpdateRun, UpdateStatus } from './updater.js';
import type { SharedStoreStatus } from './shared-store.js';
import { redactUrl } from '../text.js';

const FAMILIES = ['ipv4', 'ipv6'] as const;

const LATENCY_NAME = 'ipr_http_request_duration_seconds';
const LATENCY_HELP = 'Time from a request reaching a worker to its answer, by route';

/**
 * The latency histogram, its buckets read from the workers' counters instead
 * of observed here: get() answers prom-client's metric object (what its
 * registry formats) from them.
 */
class SharedLatencyHistogram extends Histogram<'route'> {
  readonly #totals: () => MetricsTotals;

  constructor(registry: Registry, totals: () => MetricsTotals) {
    super({
      name: LATENCY_NAME,
      help: LATENCY_HELP,
      labelNames: ['route'],
      buckets: LATENCY_BOUNDS_US.map((us) => us / 1e6),
      registers: [registry],
    });
    this.#totals = totals;
  }

  override async get(): Promise<Awaited<ReturnType<Histogram<'route'>['get']>>> {
    const { buckets, seconds } = this.#totals();
    const name = LATENCY_NAME;
    const values = ROUTES.flatMap((route, r) => {
      const counts = buckets[r]!;
      const count = counts.reduce((a, b) => a + b, 0);
      if (count === 0) return [];
      let cumulative = 0;
      return [
        ...LATENCY_BOUNDS_US.map((us, b) => {
          cumulative += counts[b]!;
          return { labels: { route, le: us / 1e6 }, value: cumulative, metricName: `${name}_bucket` };
        }),
        { labels: { route, le: '+Inf' }, value: count, metricName: `${name}_bucket` },
        { labels: { route }, value: seconds[r]!, metricName: `${name}_sum` },
        { labels: { route }, value: count, metricName: `${name}_count` },
      ];
    });
    const metric = { name, help: LATENCY_HELP, type: 'histogram', values, aggregator: 'sum' };
    return metric as unknown as Awaited<ReturnType<Histogram<'route'>['get']>>; // prom-client types `type` as an enum its code does not use
  }

  /** What the registry calls when it formats the text exposition. */
  async getForPromString() {
    return this.get();
  }
}

/** Every metric the admin port serves. */
export class OperationsMetrics {
  readonly registry = new Registry();
  readonly #swaps: Counter;
  readonly #snapshotProblems: Counter<'problem'>;
  readonly #updates: Counter<'result'>;
  readonly #updateSeconds: Gauge;
  readonly #lastSuccess: Gauge;

  /** `sharedStore`: the state of the node's shared customer store (Redis), when it serves one. */
  constructor(reader: MetricsReader, snapshot: Snapshot, store: AccountStore, sharedStore: (() => SharedStoreStatus) | null = null) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    const read = () => reader.read();
    new Counter({
      name: 'ipr_http_requests_total',
      help: 'Requests answered, by route and status ("aborted": the client went away first)',
      labelNames: ['route', 'status'],
      registers,
      collect() {
        this.reset();
        const { requests } = read();
        ROUTES.forEach((route, r) =>
          STATUSES.forEach((status, s) => {
            const n = requests[r]![s]!;
            if (n > 0) this.inc({ route, status: status === 0 ? 'aborted' : String(status) }, n);
          }),
        );
      },
    });
    new SharedLatencyHistogram(this.registry, read);
    new Counter({
      name: 'ipr_rate_limit_rejections_total',
      help: 'Requests refused with 429, by the limit that refused them (day, second: a key; address: no valid key)',
      labelNames: ['limit'],
      registers,
      collect() {
        this.reset();
        const { limited } = read();
        LIMITS.forEach((limit, l) => this.inc({ limit }, limited[l]!));
      },
    });
    const info = () => snapshot.info();
    new Gauge({
      name: 'ipr_snapshot_age_seconds',
      help: 'Seconds since the serving snapshot was built',
      registers,
      collect() {
        this.set((Date.now() - Date.parse(info().built_at)) / 1000);
      },
    });
    new Gauge({
      name: 'ipr_snapshot_build_timestamp_seconds',
      help: 'When the serving snapshot was built, Unix seconds',
      registers,
      collect() {
        this.set(Date.parse(info().built_at) / 1000);
      },
    });
    new Gauge({
      name: 'ipr_snapshot_prefixes',
      help: 'Prefixes in each table of the serving snapshot, by address family',
      labelNames: ['table', 'family'],
      registers,
      collect() {
        this.reset();
        const tables = (info().meta.tables ?? {}) as Record<string, Record<string, number>>;
        for (const [table, counts] of Object.entries(tables)) {
          for (const family of FAMILIES) this.set({ table, family }, counts[family] ?? 0);
        }
      },
    });
    new Gauge({
      name: 'ipr_snapshot_records',
      help: 'Company, ASN and location records in the serving snapshot',
      labelNames: ['kind'],
      registers,
      collect() {
        this.reset();
        const records = (info().meta.records ?? {}) as Record<string, number>;
        for (const [kind, n] of Object.entries(records)) this.set({ kind }, n);
      },
    });
    new Gauge({
      name: 'ipr_source_records',
      help: 'Records each source gave the serving snapshot',
      labelNames: ['source'],
      registers,
      collect() {
        this.reset();
        for (const s of info().meta.sources) this.set({ source: s.name }, s.records);
      },
    });
    new Gauge({
      name: 'ipr_source_last_good_copy_used',
      help: '1 when the serving snapshot was built from a source\'s last good copy because its new copy failed or was refused',
      labelNames: ['source'],
      registers,
      collect() {
        this.reset();
        for (const s of info().meta.sources) if (s.used_last_good_copy !== undefined) this.set({ source: s.name }, s.used_last_good_copy ? 1 : 0);
      },
    });
    new Gauge({
      name: 'ipr_key_slots',
      help: 'Slots of the limit table: capacity (--max-keys), used (held by active keys); key creation is refused once used reaches capacity (the dashboard: 90% of it)',
      labelNames: ['state'],
      registers,
      collect() {
        this.set({ state: 'capacity' }, store.keySlots());
        this.set({ state: 'used' }, store.usedSlots());
      },
    });
    const refusals = (name: string, help: string, reasons: string[]) =>
      new Counter({
        name,
        help,
        labelNames: ['reason'],
        registers,
        collect() {
          this.reset();
          const counted = store.refusals();
          for (const reason of reasons) this.inc({ reason }, counted.get(reason) ?? 0);
        },
      });
    // Counted in the account store: the CLI's refusals too, across restarts.
    refusals('ipr_key_creations_refused_total', 'Keys not made: key_slots (no slot left for it), keys_per_day (the dashboard\'s daily cap)', ['key_slots', 'keys_per_day']);
    refusals('ipr_signups_refused_total', 'Sign-ups refused by the daily cap (--max-signups-per-day)', ['signups_per_day']);
    if (sharedStore !== null) {
      const gauge = (name: string, help: string, value: (s: SharedStoreStatus) => number) =>
        new Gauge({
          name,
          help,
          registers,
          collect() {
            this.set(value(sharedStore()));
          },
        });
      const counter = (name: string, help: string, value: (s: SharedStoreStatus) => number) =>
        new Counter({
          name,
          help,
          registers,
          collect() {
            this.reset();
            this.inc(value(sharedStore()));
          },
        });
      gauge('ipr_store_up', '1 while the shared customer store (Redis) answers the lease calls and the change stream is followed', (s) => (s.up ? 1 : 0));
      gauge('ipr_store_stale_seconds', 'Seconds since the shared customer store last answered (0 while it does)', (s) => s.staleSeconds);
      gauge('ipr_store_refusing', '1 while keyed requests are answered 503: the store has been unreachable past --store-max-stale', (s) => (s.refusing ? 1 : 0));
      new Counter({
        name: 'ipr_store_lease_calls_total',
        help: 'Calls to the shared store for limit leases, by why (the request path makes none)',
        labelNames: ['reason'],
        registers,
        collect() {
          this.reset();
          for (const [reason, n] of Object.entries(sharedStore().leaseCalls)) this.inc({ reason }, n);
        },
      });
      counter('ipr_store_changes_applied_total', 'Customer changes from the store\'s change stream applied to this node\'s replica', (s) => s.changesApplied);
      counter('ipr_store_resyncs_total', 'Full reads of every customer into the replica (at start, or when the stream could not say what changed)', (s) => s.resyncs);
    }
    this.#swaps = new Counter({ name: 'ipr_snapshot_swaps_total', help: 'Newly published snapshots the server moved to', registers });
    this.#snapshotProblems = new Counter({
      name: 'ipr_snapshot_problems_total',
      help: 'Snapshot problems: refused (a newly published snapshot failed to open; the previous one keeps answering), damaged (the snapshot being served was changed on disk)',
      labelNames: ['problem'],
      registers,
    });
    for (const problem of ['refused', 'damaged']) this.#snapshotProblems.inc({ problem }, 0);
    this.#updates = new Counter({
      name: 'ipr_updates_total',
      help: 'Scheduled updates by result: published, unchanged (nothing new), held (after a rollback), failed',
      labelNames: ['result'],
      registers,
    });
    for (const result of ['published', 'unchanged', 'held', 'failed']) this.#updates.inc({ result }, 0);
    this.#updateSeconds = new Gauge({ name: 'ipr_update_duration_seconds', help: 'How long the last scheduled update ran', registers });
    this.#lastSuccess = new Gauge({
      name: 'ipr_update_last_success_timestamp_seconds',
      help: 'When a scheduled update last ended without failing, Unix seconds (0: never)',
      registers,
    });
  }

  snapshotSwapped(): void {
    this.#swaps.inc();
  }

  snapshotProblem(problem: 'refused' | 'damaged'): void {
    this.#snapshotProblems.inc({ problem });
  }

  updateFinished(run: UpdateRun): void {
    this.#updates.inc({ result: run.result });
    this.#updateSeconds.set(run.seconds);
    if (run.result !== 'failed') this.#lastSuccess.set(Date.now() / 1000);
  }
}

/** The serving snapshot and where its data came from: what GET /provenance answers. */
export function provenance(snapshot: Snapshot, updates: UpdateStatus | null): object {
  const { path, meta, built_at, ...rest } = snapshot.info();
  const { sources, tables, records, ...build } = meta;
  return {
    snapshot: { path, built_at, age_seconds: Math.round((Date.now() - Date.parse(built_at)) / 1000), ...rest, ...build },
    // A snapshot built before locations were redacted may hold a feed's credentials.
    sources: sources.map((s) => ({ ...s, location: redactUrl(s.location) })),
    tables,
    records,
    updates,
  };
}

/**
 * Whether a Host header names this machine's loopback: `localhost`, an
 * address of 127.0.0.0/8 or [::1], with or without a port. A page on
 * another site that rebinds its own name to 127.0.0.1 sends its own name.
 */
function isLoopbackHost(header: string): boolean {
  const host = header.startsWith('[') ? header.slice(1, header.indexOf(']')) : header.replace(/:[0-9]*$/, '');
  return isLoopback(host.toLowerCase());
}

function isLoopback(host: string): boolean {
  if (host === 'localhost') return true;
  try {
    return ipaddr.process(host).range() === 'loopback';
  } catch {
    return false;
  }
}

function digest(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

export interface AdminOptions {
  host: string;
  port: number;
  /** Required of every request when set; required to be set when `host` is not loopback. */
  token: string | null;
  metrics: OperationsMetrics;
  provenance: () => object;
  /** Serve the published snapshot files of this data folder at /snapshots/<name>: the builder of several nodes (docs/DEPLOY.md "Many nodes"). */
  snapshotsOf?: string;
}

export interface AdminServer {
  host: string;
  port: number;
  close(): Promise<void>;
}

export async function startAdmin(options: AdminOptions): Promise<AdminServer> {
  if (options.token === null && !isLoopback(options.host)) {
    throw new IprError(
      'invalid_argument',
      `the admin port on ${options.host} (not loopback) needs a token: set IPR_ADMIN_TOKEN or --admin-token-file`,
    );
  }
  if (options.token !== null && options.token.length < 16) throw new IprError('invalid_argument', 'the admin token needs at least 16 characters');
  const expected = options.token === null ? null : digest(`Bearer ${options.token}`);
  const server = http.createServer((req, res) => {
    const send = (status: number, type: string, body: string) => {
      res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store' }).end(body);
    };
    const json = 'application/json; charset=utf-8';
    if (expected !== null && !timingSafeEqual(digest(req.headers.authorization ?? ''), expected)) {
      res.setHeader('www-authenticate', 'Bearer');
      send(401, json, errorBody('unauthorized'));
      return;
    }
    // Without a token, only a loopback name may be asked for: DNS rebinding
    // would otherwise let a page in the operator's browser read this port.
    if (expected === null && !isLoopbackHost(req.headers.host ?? '')) {
      send(403, json, errorBody('host_refused'));
      return;
    }
    const route = (req.url ?? '').split('?')[0];
    if (options.snapshotsOf !== undefined && route?.startsWith('/snapshots/') && (req.method === 'GET' || req.method === 'HEAD')) {
      serveSnapshotFile(options.snapshotsOf, req, res);
      return;
    }
    if (route !== '/metrics' && route !== '/provenance') {
      send(404, json, errorBody('not_found'));
      return;
    }
    if (req.method !== 'GET') {
      res.setHeader('allow', 'GET');
      send(405, json, errorBody('method_not_allowed', { allowed: ['GET'] }));
      return;
    }
    const answer =
      route === '/metrics'
        ? options.metrics.registry.metrics().then((text) => [options.metrics.registry.contentType, text])
        : new Promise<string[]>((resolve) => resolve([json, JSON.stringify(options.provenance(), null, 2)]));
    answer.then(
      ([type, body]) => send(200, type!, body!),
      () => send(500, json, errorBody('internal_error')),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (error: NodeJS.ErrnoException) =>
      reject(new IprError('server_failed', `admin port ${options.host}:${options.port}: ${error.code ?? error.message}`)),
    );
    server.listen(options.port, options.host, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    host: options.host,
    port,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
