/**
 * Scheduled updates (`ipr serve --update-interval`): every interval, `ipr
 * update` runs as a child process, never two at once. A child, because a full
 * build holds 1-2 GiB for a while and none of it should stay in the server;
 * at a lower CPU priority than the workers, so that requests come first. The
 * child publishes into the data folder, and the server's watch moves every
 * worker to the new snapshot; this side only schedules, logs and counts.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import os from 'node:os';
import { fileURLToPath } from 'node:url';
import type { Logger } from '../log.js';

/** What an update run reports to the metrics. */
export interface UpdateRun {
  result: 'published' | 'unchanged' | 'held' | 'failed';
  seconds: number;
  /** Sources whose last good copy stood in for a new one. */
  fallbacks: string[];
}

export interface UpdaterOptions {
  dataDir: string;
  /** The sources configuration file. */
  sources: string;
  intervalMs: number;
  /** Older snapshots to keep (ipr update --keep). */
  keep?: number;
  /** More arguments of `ipr update`: --store and --announce on the builder of several nodes. */
  extraArgs?: string[];
  /** When the serving snapshot was built: one older than the interval is updated at once. */
  builtAt: Date;
  log: Logger;
  onFinished(run: UpdateRun): void;
}

/** What the admin view shows of the scheduled updates. */
export interface UpdateStatus {
  interval_seconds: number;
  sources: string;
  running: boolean;
  next_at: string | null;
  last: (UpdateRun & { started_at: string; finished_at: string; snapshot?: string; error?: string }) | null;
}

const CLI = fileURLToPath(new URL('../cli/main.js', import.meta.url));
/** Nice value of the update process: below the server's threads, above idle. */
const UPDATE_PRIORITY = 10;
const KILL_AFTER_MS = 10_000;

/** The report line `ipr update --json` prints. */
interface Report {
  result: 'published' | 'unchanged' | 'held';
  seconds: number;
  snapshot?: string;
  sources?: { name: string; status: string; reason?: string }[];
}

export class ScheduledUpdates {
  readonly #options: UpdaterOptions;
  #timer: NodeJS.Timeout | undefined;
  #next: number | null = null;
  #child: ChildProcess | null = null;
  #exited: Promise<void> | null = null;
  #last: UpdateStatus['last'] = null;
  #closed = false;

  constructor(options: UpdaterOptions) {
    this.#options = options;
    this.#schedule(Math.max(0, options.builtAt.getTime() + options.intervalMs - Date.now()));
  }

  status(): UpdateStatus {
    return {
      interval_seconds: this.#options.intervalMs / 1000,
      sources: this.#options.sources,
      running: this.#child !== null,
      next_at: this.#next === null ? null : new Date(this.#next).toISOString(),
      last: this.#last,
    };
  }

  /** Stops scheduling; an update running is ended (it never leaves a partial publication). */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#next = null;
    const child = this.#child;
    if (child !== null) {
      child.kill('SIGTERM');
      const kill = setTimeout(() => child.kill('SIGKILL'), KILL_AFTER_MS);
      await this.#exited;
      clearTimeout(kill);
    }
  }

  #schedule(delayMs: number): void {
    if (this.#closed) return;
    this.#next = Date.now() + delayMs;
    this.#timer = setTimeout(() => this.#run(), delayMs);
    this.#timer.unref();
  }

  #run(): void {
    const { dataDir, sources, keep, log } = this.#options;
    const startedAt = Date.now();
    this.#next = null;
    const args = [CLI, 'update', '--sources', sources, '--data', dataDir, '--json', ...(keep === undefined ? [] : ['--keep', String(keep)]), ...(this.#options.extraArgs ?? [])];
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    this.#child = child;
    try {
      if (child.pid !== undefined) os.setPriority(child.pid, UPDATE_PRIORITY);
    } catch {
      // not permitted here: it runs at the server's priority
    }
    log.info({ event: 'update', child: child.pid, sources }, 'update started');
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (d: Buffer) => (stdout += d));
    // Progress and warnings; keep the end, where a failure's message is.
    child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d).slice(-4096)));
    this.#exited = new Promise((resolve) => {
      child.once('close', (code, signal) => {
        this.#child = null;
        this.#finished(code, signal, stdout, stderr, startedAt);
        this.#schedule(Math.max(1000, startedAt + this.#options.intervalMs - Date.now()));
        resolve();
      });
    });
  }

  #finished(code: number | null, signal: NodeJS.Signals | null, stdout: string, stderr: string, startedAt: number): void {
    const { log } = this.#options;
    const seconds = (Date.now() - startedAt) / 1000;
    const times = { started_at: new Date(startedAt).toISOString(), finished_at: new Date().toISOString() };
    let report: Report | null = null;
    try {
      report = code === 0 ? (JSON.parse(stdout.trim().split('\n').pop()!) as Report) : null;
    } catch {
      report = null;
    }
    if (report === null) {
      const error = signal ? `ended by ${signal}` : (stderr.trim().split('\n').filter((l) => l.startsWith('ipr: ')).pop() ?? `exit code ${code}`);
      const run: UpdateRun = { result: 'failed', seconds, fallbacks: [] };
      this.#last = { ...run, ...times, error };
      log.error({ event: 'update', result: 'failed', seconds, code, signal, error }, 'update failed; the published snapshot keeps serving');
      this.#options.onFinished(run);
      return;
    }
    const fallbacks = (report.sources ?? []).filter((s) => s.status === 'last_good_copy' || s.status === 'skipped');
    for (const s of fallbacks) log.warn({ event: 'update', source: s.name, reason: s.reason }, `source ${s.name}: the last good copy was used`);
    const run: UpdateRun = { result: report.result, seconds, fallbacks: fallbacks.map((s) => s.name) };
    this.#last = { ...run, ...times, ...(report.snapshot ? { snapshot: report.snapshot } : {}) };
    const message = { published: 'update published a new snapshot', unchanged: 'update found nothing new', held: 'update held since a rollback' }[report.result];
    log[report.result === 'held' ? 'warn' : 'info']({ event: 'update', ...run, snapshot: report.snapshot }, message);
    this.#options.onFinished(run);
  }
}
