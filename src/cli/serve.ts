/**
 * The server commands: serve, start (serve, building a first snapshot from
 * the default sources when the data folder has none) and openapi.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseDuration } from '../clock.js';
import { IprError } from '../errors.js';
import { buildSnapshot } from '../pipeline/build.js';
import { publishedName } from '../pipeline/publish.js';
import { loadPlans } from '../plans.js';
import { refuseShared } from '../private-files.js';
import { clientTypes, openapiDocument } from '../server/openapi.js';
import { serve, type RunningServer } from '../server/serve.js';
import { dataDirOf, integerOption, keepOption, options, STORE_OPTION, storeUrlOf, UsageError, type Command } from './args.js';
import { endProgress, printSummary, progressPrinter, warningPrinter } from './output.js';

const DEFAULT_SOURCES = new URL('../../sources/default.sources.json', import.meta.url);

/** Serves until SIGTERM or SIGINT, then shuts down gracefully. */
async function runServer(server: RunningServer, dataDir: string): Promise<void> {
  // Every address (0.0.0.0, ::): localhost reaches it; an IPv6 literal goes in brackets in a URL.
  const host = server.host === '0.0.0.0' || server.host === '::' ? 'localhost' : server.host.includes(':') ? `[${server.host}]` : server.host;
  // The admin and dashboard lines first: "serving" is the last line of start-up, which tests and scripts wait for.
  if (server.admin) process.stdout.write(`ipr: admin port http://${server.admin.host}:${server.admin.port} (/metrics, /provenance)\n`);
  process.stdout.write(`ipr: dashboard http://${host}:${server.port}/dashboard\n`);
  process.stdout.write(`ipr: serving http://${host}:${server.port}/v1 (${server.workers} workers, data ${dataDir})\n`);
  await new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      process.stdout.write(`ipr: ${signal}: finishing requests in flight\n`);
      void server.close().then(resolve);
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
  process.stdout.write('ipr: stopped\n');
}

const serveOptions = {
  port: { type: 'string' },
  host: { type: 'string' },
  workers: { type: 'string' },
  'max-keys': { type: 'string' },
  'max-signups-per-day': { type: 'string' },
  'max-keys-per-day': { type: 'string' },
  clock: { type: 'string' },
  signup: { type: 'boolean' },
  'trust-proxy': { type: 'boolean' },
  'update-interval': { type: 'string' },
  sources: { type: 'string' },
  keep: { type: 'string' },
  'admin-port': { type: 'string' },
  'admin-host': { type: 'string' },
  'admin-token-file': { type: 'string' },
  'access-log': { type: 'string' },
  ...STORE_OPTION,
  'store-max-stale': { type: 'string' },
  announce: { type: 'string' },
  follow: { type: 'boolean' },
} as const;

/** The admin port's token: the file --admin-token-file names, else IPR_ADMIN_TOKEN, else none. */
function adminToken(file: string | undefined): string | null {
  if (file === undefined) return process.env.IPR_ADMIN_TOKEN || null;
  try {
    refuseShared(file, '--admin-token-file');
    return readFileSync(file, 'utf8').trim();
  } catch (error) {
    if (error instanceof IprError) throw error;
    throw new IprError('invalid_argument', `--admin-token-file ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
  }
}

/** A first snapshot from the default sources, from whatever answers now (updates retry the rest). */
async function buildFirstSnapshot(dataDir: string): Promise<void> {
  process.stdout.write(`ipr: no snapshot in ${dataDir}: building one from the default sources (upstream feeds, npm ASN and DB-IP data)\n`);
  const summary = await buildSnapshot({
    sources: fileURLToPath(DEFAULT_SOURCES),
    dataDir,
    skipUnreachable: true,
    // Someone is waiting for a first start: build from what answers now; updates retry.
    fetch: { retries: 0 },
    onProgress: progressPrinter(),
    onWarning: warningPrinter(),
  });
  endProgress();
  printSummary(summary);
  const skipped = summary.sources.filter((s) => s.skipped);
  if (skipped.length) process.stdout.write(`ipr: could not reach ${skipped.length} sources: ${skipped.map((s) => s.name).join(', ')}\n`);
}

function printFirstSteps(dataDir: string, port: number): void {
  process.stdout.write(
    [
      'ipr: to make a first account and API key:',
      `  echo 'a password of 10+ characters' | npx ipr accounts create --data ${dataDir} --email you@example.com --plan pro`,
      `  npx ipr keys create --data ${dataDir} --account you@example.com --name production`,
      `  (or sign in at http://localhost:${port}/dashboard and choose Create New Key)`,
      `  curl -s -H "Authorization: Bearer <the key>" -H 'Content-Type: application/json' -d '{"ip":"8.8.8.8"}' http://localhost:${port}/v1/check`,
      '',
    ].join('\n'),
  );
}

async function serveCommand(args: string[], buildIfMissing: boolean): Promise<number> {
  const { values } = options(args, serveOptions);
  const dataDir = dataDirOf(values);
  if ((values['update-interval'] === undefined) !== (values.sources === undefined)) {
    throw new UsageError('--update-interval and --sources go together');
  }
  if (values.keep !== undefined && values['update-interval'] === undefined) throw new UsageError('--keep goes with --update-interval');
  const intervalMs = values['update-interval'] === undefined ? undefined : parseDuration(values['update-interval']);
  if (intervalMs === null) throw new UsageError('--update-interval takes a duration of at least 1 s: 90s, 15m, 1h, 1d');
  if (values['admin-port'] === undefined && (values['admin-host'] || values['admin-token-file'])) {
    throw new UsageError('--admin-host and --admin-token-file need --admin-port');
  }
  const store = storeUrlOf(values);
  if (values['store-max-stale'] !== undefined && store === undefined) throw new UsageError('--store-max-stale goes with --store (or IPR_STORE)');
  const maxStaleMs = values['store-max-stale'] === undefined ? undefined : parseDuration(values['store-max-stale']);
  if (maxStaleMs === null) throw new UsageError('--store-max-stale takes a duration of at least 1 s: 30s, 2m');
  if (buildIfMissing && publishedName(dataDir) === null) await buildFirstSnapshot(dataDir);
  const server = await serve({
    dataDir,
    port: integerOption(values.port, '--port', 8080)!,
    ...(values.host ? { host: values.host } : {}),
    ...(values.workers ? { workers: integerOption(values.workers, '--workers', undefined, 1)! } : {}),
    ...(values['max-keys'] ? { maxKeys: integerOption(values['max-keys'], '--max-keys', undefined, 1)! } : {}),
    ...(values.clock ? { clockFile: values.clock } : {}),
    ...(values['max-signups-per-day'] ? { signupsPerDay: integerOption(values['max-signups-per-day'], '--max-signups-per-day', undefined)! } : {}),
    ...(values['max-keys-per-day'] ? { keysPerDay: integerOption(values['max-keys-per-day'], '--max-keys-per-day', undefined)! } : {}),
    signup: values.signup === true,
    trustProxy: values['trust-proxy'] === true,
    ...(intervalMs === undefined ? {} : { update: { sources: values.sources!, intervalMs, ...keepOption(values.keep) } }),
    ...(values['admin-port'] === undefined
      ? {}
      : {
          admin: {
            port: integerOption(values['admin-port'], '--admin-port', undefined)!,
            ...(values['admin-host'] ? { host: values['admin-host'] } : {}),
            token: adminToken(values['admin-token-file']),
          },
        }),
    ...(values['access-log'] ? { accessLog: values['access-log'] } : {}),
    ...(store === undefined ? {} : { store }),
    ...(maxStaleMs === undefined ? {} : { storeMaxStaleMs: maxStaleMs }),
    ...(values.announce === undefined ? {} : { announce: values.announce }),
    follow: values.follow === true,
  });
  if (buildIfMissing) printFirstSteps(dataDir, server.port);
  await runServer(server, dataDir);
  return 0;
}

export const serveCommands: Command[] = [
  {
    name: 'serve',
    usage: `serve  [--data DIR] [--port N] [--host H] [--workers N] [--max-keys N] [--signup] [--trust-proxy]
         [--max-signups-per-day N] [--max-keys-per-day N]
         [--update-interval 1h --sources FILE [--keep N]]
         [--admin-port N [--admin-host H] [--admin-token-file F]] [--access-log FILE]
         [--store redis://... [--store-max-stale 60s] [--follow | --announce BASE_URL]]
         Serve the API at /v1 and the customer dashboard at /dashboard (default port 8080,
         one worker thread per core). --signup lets anyone make an account in the dashboard;
         --trust-proxy trusts a reverse proxy's X-Forwarded-Proto/-For/-Host in the dashboard.
         --max-keys sets how many active keys the data folder holds (remembered; default 1,048,576);
         the dashboard takes at most 1,000 sign-ups and makes at most 10,000 keys a day (the caps).
         Optionally run "ipr update" every interval, and serve /metrics and /provenance on an
         admin port. --store (or IPR_STORE) serves the customers of a shared Redis store, with
         limits shared across every node serving it (docs/DEPLOY.md "Many nodes"); past
         --store-max-stale without Redis, keyed requests are answered 503 until it is back.
         With a store, one node builds (--update-interval with --announce: its admin port
         serves the snapshots it publishes) and the others --follow: they fetch, verify and
         swap in each announced snapshot.`,
    run: (args) => serveCommand(args, false),
  },
  {
    name: 'start',
    usage: `start  [--data DIR] [--port N] (and the options of serve)
         Build a snapshot from sources/default.sources.json if DIR has none, then serve (npm start).`,
    run: (args) => serveCommand(args, true),
  },
  {
    name: 'openapi',
    usage: `openapi [--client-types]
         Print the OpenAPI 3.1 document of the API, or with --client-types the TypeScript types
         of its bodies (npm run openapi writes openapi.json and src/client/types.ts).`,
    run: async (args) => {
      const { values } = options(args, { 'client-types': { type: 'boolean' } });
      const document = openapiDocument(loadPlans());
      process.stdout.write(values['client-types'] ? clientTypes(document) : `${JSON.stringify(document, null, 2)}\n`);
      return 0;
    },
  },
];
