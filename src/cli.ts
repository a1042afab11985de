#!/usr/bin/env node
/**
 * `ipr`: the operator's command line. `ipr help` lists the commands.
 */
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { buildSnapshot, type BuildProgress, type BuildSummary } from './build/build.js';
import { builtAtOfName, publishedName, rollback, withDataLock } from './build/publish.js';
import { updateSnapshot, type UpdateOptions, type UpdateResult } from './build/update.js';
import { IprError } from './errors.js';
import { AccountStore, dayOf } from './server/accounts.js';
import { openapiDocument } from './server/openapi.js';
import { loadPlans } from './server/plans.js';
import { serve, type RunningServer } from './server/serve.js';
import { parseDuration } from './server/updater.js';
import { openSnapshot } from './snapshot.js';

const USAGE = `usage: ipr <command> [options]

  build  --sources FILE [--data DIR] [--keep N] [--skip-unreachable]
         Build a snapshot from the sources configuration FILE and publish it in DIR.
  update --sources FILE [--data DIR] [--keep N] [--force] [--timeout S] [--retries N]
         [--accept-shrink NAME,...] [--skip-unreachable] [--json]
         Fetch every source (conditional requests; a failed, broken or shrunken download
         keeps the last good copy), then build and publish unless nothing changed.
  rollback [--data DIR]
         Publish the snapshot before the published one, and hold updates until
         "update --force" or "build".
  lookup IP... [--data DIR]
         Print the check result of each address, as the API answers it.
  info   [--data DIR]
         Print the published snapshot's metadata: build time and age, and every source's
         provenance (origin, fetched-at, ETag, records, bad lines, last good copy used).
  serve  [--data DIR] [--port N] [--host H] [--workers N] [--max-keys N] [--signup] [--trust-proxy]
         [--update-interval 1h --sources FILE [--keep N]]
         [--admin-port N [--admin-host H] [--admin-token-file F]] [--access-log FILE]
         Serve the API at /v1 and the customer dashboard at /dashboard (default port 8080,
         one worker thread per core). --signup lets anyone make an account in the dashboard;
         --trust-proxy trusts a reverse proxy's X-Forwarded-Proto/-For/-Host in the dashboard.
         Optionally run "ipr update" every interval, and serve /metrics and /provenance on an
         admin port.
  start  [--data DIR] [--port N] (and the options of serve)
         Build a snapshot from sources/default.sources.json if DIR has none, then serve (npm start).
  openapi
         Print the OpenAPI 3.1 document of the API (npm run openapi writes openapi.json).

  accounts create --email E --plan P        (the password is read from stdin)
  accounts set-plan --email E --plan P
  accounts suspend --email E
  accounts reactivate --email E
  keys create --account E --name N [--count K] [--allow CIDR,...]
         Prints each new key once, alone on its line, last on stdout.
  keys list --account E
  keys revoke --account E --prefix P
  keys allow --account E --prefix P --from CIDR,...   (empty: from anywhere)

  --data DIR defaults to ./data.`;

class UsageError extends Error {}

function options<T extends Record<string, { type: 'string' | 'boolean' }>>(args: string[], spec: T, positionals = false) {
  try {
    return parseArgs({ args, options: { data: { type: 'string' }, ...spec }, allowPositionals: positionals, strict: true });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
}

function formatBytes(bytes: number): string {
  return bytes >= 1 << 20 ? `${(bytes / (1 << 20)).toFixed(1)} MiB` : `${(bytes / 1024).toFixed(1)} KiB`;
}

function table(rows: (string | number)[][], rightFrom: number): string {
  const text = rows.map((r) => r.map((c) => (typeof c === 'number' ? c.toLocaleString('en-US') : c)));
  const widths = text[0]!.map((_, i) => Math.max(...text.map((r) => r[i]!.length)));
  return text.map((r) => r.map((c, i) => (i >= rightFrom ? c.padStart(widths[i]!) : c.padEnd(widths[i]!))).join('  ').trimEnd()).join('\n');
}

function bar(fraction: number, width = 30): string {
  const filled = Math.round(fraction * width);
  return `${'#'.repeat(filled)}${'.'.repeat(width - filled)}`;
}

function progressPrinter(): (event: BuildProgress) => void {
  const tty = process.stderr.isTTY;
  let lastSource = -1;
  let lastDone = -1;
  let lastDraw = 0;
  return (event) => {
    if (event.phase === 'download') {
      // A terminal is redrawn at most ten times a second; a log gets a line per finished download.
      const now = Date.now();
      if (tty ? now - lastDraw < 100 && event.done !== event.total : event.done === lastDone) return;
      lastDraw = now;
      lastDone = event.done;
      const text = `downloaded ${event.done}/${event.total} sources, ${formatBytes(event.bytes)}`;
      process.stderr.write(tty ? `\r\x1b[K${'downloads'.padEnd(40)} ${bar(event.done / event.total)} ${text}` : `${text}\n`);
      return;
    }
    if (event.phase !== 'source') {
      process.stderr.write(`${tty ? '\r\x1b[K' : ''}${event.phase === 'compile' ? 'compiling tries' : 'writing snapshot'}...\n`);
      return;
    }
    const label = `[${event.index + 1}/${event.total}] ${event.source}`;
    if (tty) {
      process.stderr.write(`\r\x1b[K${label.padEnd(40)} ${bar(event.fraction)} ${Math.round(event.fraction * 100)}%`);
    } else if (event.index !== lastSource) {
      process.stderr.write(`${label}\n`);
    }
    lastSource = event.index;
  };
}

function printSummary(s: BuildSummary): void {
  const sources = [
    ['source', 'kind', 'format', 'records', 'bad lines', 'seconds'],
    ...s.sources.map((x) => [x.name, x.kind, x.format, x.skipped ? 'skipped' : x.records, x.bad_lines, x.seconds.toFixed(2)]),
  ];
  const tables = [
    ['table', 'IPv4 ranges', 'IPv4 prefixes', 'IPv6 ranges', 'IPv6 prefixes'],
    ...s.tables.map((t) => [t.name, t.ranges[0], t.prefixes[0], t.ranges[1], t.prefixes[1]]),
  ];
  const lines = [
    table(sources, 3),
    '',
    table(tables, 1),
    '',
    `ASN records flagged by ASN lists: ${s.flaggedAsnRecords.toLocaleString('en-US')}`,
    `records: ${s.records.companies.toLocaleString('en-US')} companies, ${s.records.asns.toLocaleString('en-US')} ASNs, ` +
      `${s.records.locations.toLocaleString('en-US')} locations`,
    `tries: IPv4 ${formatBytes(s.trieBytes[0])} (${s.intervals[0].toLocaleString('en-US')} answer runs, ` +
      `${s.leaves[0].toLocaleString('en-US')} leaves), IPv6 ${formatBytes(s.trieBytes[1])} ` +
      `(${s.intervals[1].toLocaleString('en-US')} answer runs, ${s.leaves[1].toLocaleString('en-US')} leaves)`,
    `snapshot: ${s.snapshot} (${formatBytes(s.fileBytes)}), built in ${s.seconds.toFixed(1)} s, published`,
  ];
  if (s.pruned.length) lines.push(`removed older snapshots: ${s.pruned.join(', ')}`);
  process.stdout.write(`${lines.join('\n')}\n`);
}

function warningPrinter(): (message: string) => void {
  return (message) => process.stderr.write(`${process.stderr.isTTY ? '\r\x1b[K' : ''}warning: ${message}\n`);
}

function keepOption(value: string | undefined): { keep?: number } {
  const keep = integerOption(value, '--keep', undefined);
  return keep === undefined ? {} : { keep };
}

async function build(args: string[]): Promise<void> {
  const { values } = options(args, {
    sources: { type: 'string' },
    keep: { type: 'string' },
    'skip-unreachable': { type: 'boolean' },
  });
  if (!values.sources) throw new UsageError('build needs --sources FILE');
  const summary = await buildSnapshot({
    sources: values.sources,
    dataDir: values.data ?? 'data',
    ...keepOption(values.keep),
    skipUnreachable: values['skip-unreachable'] === true,
    onProgress: progressPrinter(),
    onWarning: warningPrinter(),
  });
  if (process.stderr.isTTY) process.stderr.write('\r\x1b[K');
  printSummary(summary);
}

/** The one-line JSON `ipr update --json` prints (what `ipr serve --update-interval` reads). */
function updateReport(r: UpdateResult): object {
  const base = { result: r.result, seconds: Number(r.seconds.toFixed(3)) };
  if (r.result === 'held') return { ...base, hold: r.hold };
  const fallbacks = r.sources.filter((s) => s.status === 'last_good_copy' || s.status === 'skipped');
  const snapshot = r.result === 'published' ? r.summary.snapshot : r.snapshot;
  return { ...base, snapshot, sources: r.sources, fallbacks: fallbacks.length, ...(r.result === 'published' ? { pruned: r.summary.pruned } : {}) };
}

async function update(args: string[]): Promise<void> {
  const { values } = options(args, {
    sources: { type: 'string' },
    keep: { type: 'string' },
    force: { type: 'boolean' },
    timeout: { type: 'string' },
    retries: { type: 'string' },
    'accept-shrink': { type: 'string' },
    'skip-unreachable': { type: 'boolean' },
    json: { type: 'boolean' },
  });
  if (!values.sources) throw new UsageError('update needs --sources FILE');
  const timeout = values.timeout === undefined ? undefined : Number(values.timeout);
  if (timeout !== undefined && !(timeout > 0 && timeout <= 3600)) throw new UsageError('--timeout takes seconds, more than 0 and at most 3600');
  const retries = integerOption(values.retries, '--retries', undefined);
  const updateOptions: UpdateOptions = {
    sources: values.sources,
    dataDir: values.data ?? 'data',
    ...keepOption(values.keep),
    force: values.force === true,
    skipUnreachable: values['skip-unreachable'] === true,
    fetch: {
      ...(timeout === undefined ? {} : { timeoutMs: timeout * 1000 }),
      ...(retries === undefined ? {} : { retries }),
      acceptShrink: cidrList(values['accept-shrink']),
    },
    onProgress: progressPrinter(),
    onWarning: warningPrinter(),
  };
  const result = await updateSnapshot(updateOptions);
  if (process.stderr.isTTY) process.stderr.write('\r\x1b[K');
  if (values.json) {
    process.stdout.write(`${JSON.stringify(updateReport(result))}\n`);
    return;
  }
  if (result.result === 'held') {
    process.stdout.write(
      `ipr: updates are held since the rollback of ${result.hold.at} (from ${result.hold.from} to ${result.hold.to}); ` +
        '"ipr update --force" builds anyway and ends the hold\n',
    );
    return;
  }
  const rows = result.sources.map((s) => [s.name, s.status.replace(/_/g, ' '), s.reason ?? '']);
  process.stdout.write(`${table([['source', 'status', 'note'], ...rows], 99)}\n\n`);
  if (result.result === 'unchanged') {
    process.stdout.write(`ipr: nothing changed; ${result.snapshot} still holds these inputs (--force builds anyway)\n`);
    return;
  }
  printSummary(result.summary);
}

async function rollbackCommand(args: string[]): Promise<void> {
  const { values } = options(args, {});
  const dataDir = values.data ?? 'data';
  const hold = await withDataLock(dataDir, async () => rollback(dataDir));
  process.stdout.write(
    `ipr: published ${hold.to} (built ${builtAtOfName(hold.to)}) in place of ${hold.from} (built ${builtAtOfName(hold.from)}); ` +
      'updates are held until "ipr update --force" or "ipr build"\n',
  );
}

function lookup(args: string[]): number {
  const { values, positionals } = options(args, {}, true);
  if (positionals.length === 0) throw new UsageError('lookup needs at least one address');
  const snapshot = openSnapshot(values.data ?? 'data');
  try {
    const results = snapshot.lookupMany(positionals);
    const body = results.length === 1 ? results[0] : results;
    process.stdout.write(`${JSON.stringify(body, null, 2)}\n`);
    return results.some((r) => 'error' in r) ? 1 : 0;
  } finally {
    snapshot.close();
  }
}

function info(args: string[]): void {
  const { values } = options(args, {});
  const snapshot = openSnapshot(values.data ?? 'data');
  try {
    const { path: file, format_version, built_at, ...rest } = snapshot.info();
    const age_seconds = Math.round((Date.now() - Date.parse(built_at)) / 1000);
    process.stdout.write(`${JSON.stringify({ path: file, format_version, built_at, age_seconds, ...rest }, null, 2)}\n`);
  } finally {
    snapshot.close();
  }
}

const DEFAULT_SOURCES = new URL('../sources/default.sources.json', import.meta.url);

function integerOption(value: string | undefined, name: string, fallback: number | undefined, min = 0): number | undefined {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!(Number.isInteger(n) && n >= min)) throw new UsageError(`${name} takes a whole number from ${min}`);
  return n;
}

/** Serves until SIGTERM or SIGINT, then shuts down gracefully and exits 0. */
async function runServer(server: RunningServer, dataDir: string): Promise<void> {
  const host = server.host === '0.0.0.0' ? 'localhost' : server.host;
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
} as const;

/** The admin port's token: the file --admin-token-file names, else IPR_ADMIN_TOKEN, else none. */
function adminToken(file: string | undefined): string | null {
  if (file === undefined) return process.env.IPR_ADMIN_TOKEN || null;
  try {
    return readFileSync(file, 'utf8').trim();
  } catch (error) {
    throw new IprError('invalid_argument', `--admin-token-file ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
  }
}

async function serveCommand(args: string[], buildIfMissing: boolean): Promise<void> {
  const { values } = options(args, serveOptions);
  const dataDir = values.data ?? 'data';
  if ((values['update-interval'] === undefined) !== (values.sources === undefined)) {
    throw new UsageError('--update-interval and --sources go together');
  }
  if (values.keep !== undefined && values['update-interval'] === undefined) throw new UsageError('--keep goes with --update-interval');
  const intervalMs = values['update-interval'] === undefined ? undefined : parseDuration(values['update-interval']);
  if (intervalMs === null) throw new UsageError('--update-interval takes a duration of at least 1 s: 90s, 15m, 1h, 1d');
  if (values['admin-port'] === undefined && (values['admin-host'] || values['admin-token-file'])) {
    throw new UsageError('--admin-host and --admin-token-file need --admin-port');
  }
  if (buildIfMissing && publishedName(dataDir) === null) {
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
    if (process.stderr.isTTY) process.stderr.write('\r\x1b[K');
    printSummary(summary);
    const skipped = summary.sources.filter((s) => s.skipped);
    if (skipped.length) process.stdout.write(`ipr: could not reach ${skipped.length} sources: ${skipped.map((s) => s.name).join(', ')}\n`);
  }
  const server = await serve({
    dataDir,
    port: integerOption(values.port, '--port', 8080)!,
    ...(values.host ? { host: values.host } : {}),
    ...(values.workers ? { workers: integerOption(values.workers, '--workers', undefined, 1)! } : {}),
    ...(values['max-keys'] ? { maxKeys: integerOption(values['max-keys'], '--max-keys', undefined, 1)! } : {}),
    ...(values.clock ? { clockFile: values.clock } : {}),
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
  });
  if (buildIfMissing) {
    process.stdout.write(
      [
        'ipr: to make a first account and API key:',
        `  echo 'a password of 10+ characters' | npx ipr accounts create --data ${dataDir} --email you@example.com --plan pro`,
        `  npx ipr keys create --data ${dataDir} --account you@example.com --name production`,
        `  (or sign in at http://localhost:${server.port}/dashboard and choose Create New Key)`,
        `  curl -s -H "Authorization: Bearer <the key>" -H 'Content-Type: application/json' -d '{"ip":"8.8.8.8"}' http://localhost:${server.port}/v1/check`,
        '',
      ].join('\n'),
    );
  }
  await runServer(server, dataDir);
}

async function readPassword(): Promise<string> {
  if (process.stdin.isTTY) {
    const rl = createInterface({ input: process.stdin, output: process.stderr });
    const answer = await rl.question('password: ');
    rl.close();
    return answer;
  }
  return readFileSync(0, 'utf8').replace(/\r?\n$/, '');
}

function requirePlan(plan: string | undefined): string {
  if (!plan) throw new UsageError('--plan P is required');
  const plans = loadPlans();
  if (!plans.has(plan)) throw new UsageError(`unknown plan "${plan}" (plans: ${[...plans.keys()].join(', ')})`);
  return plan;
}

async function accountsCommand(args: string[]): Promise<void> {
  const [action, ...rest] = args;
  const { values } = options(rest, { email: { type: 'string' }, plan: { type: 'string' } });
  if (!values.email) throw new UsageError(`accounts ${action ?? ''} needs --email E`);
  const store = new AccountStore(values.data ?? 'data');
  try {
    switch (action) {
      case 'create': {
        const plan = requirePlan(values.plan);
        const account = await store.createAccount(values.email, await readPassword(), plan);
        process.stdout.write(`created account ${account.email} (plan ${account.plan})\n`);
        return;
      }
      case 'set-plan': {
        const account = store.setPlan(values.email, requirePlan(values.plan));
        process.stdout.write(`${account.email}: plan ${account.plan}\n`);
        return;
      }
      case 'suspend':
      case 'reactivate': {
        const account = store.setStatus(values.email, action === 'suspend' ? 'suspended' : 'active');
        process.stdout.write(`${account.email}: ${account.status}\n`);
        return;
      }
      default:
        throw new UsageError(`unknown accounts command "${action ?? ''}"`);
    }
  } finally {
    await store.close();
  }
}

function cidrList(value: string | undefined): string[] {
  return value === undefined || value.trim() === '' ? [] : value.split(',').map((s) => s.trim());
}

async function keysCommand(args: string[]): Promise<void> {
  const [action, ...rest] = args;
  const { values } = options(rest, {
    account: { type: 'string' },
    name: { type: 'string' },
    count: { type: 'string' },
    allow: { type: 'string' },
    prefix: { type: 'string' },
    from: { type: 'string' },
  });
  if (!values.account) throw new UsageError(`keys ${action ?? ''} needs --account E`);
  const store = new AccountStore(values.data ?? 'data');
  try {
    switch (action) {
      case 'create': {
        if (!values.name) throw new UsageError('keys create needs --name N');
        const count = integerOption(values.count, '--count', 1, 1)!;
        const keys: string[] = [];
        for (let i = 0; i < count; i++) {
          const name = count === 1 ? values.name : `${values.name} ${i + 1}`;
          const { key, record } = store.createKey(values.account, name, cidrList(values.allow));
          process.stderr.write(`created key ${record.prefix} "${record.name}" for ${record.account}${i === 0 ? '; it is shown once, now:' : ''}\n`);
          keys.push(key);
        }
        process.stdout.write(`${keys.join('\n')}\n`);
        return;
      }
      case 'list': {
        const today = dayOf(Date.now());
        const rows = store.listKeys(values.account).map((k) => [
          k.prefix,
          k.name,
          k.created.slice(0, 19).replace('T', ' '),
          k.lastUsed ? k.lastUsed.slice(0, 19).replace('T', ' ') : 'never',
          k.revoked ? `revoked ${k.revoked.slice(0, 10)}` : 'active',
          store.usage(k.id, today),
          k.allowed.join(',') || 'anywhere',
        ]);
        process.stdout.write(`${table([['prefix', 'name', 'created (UTC)', 'last used (UTC)', 'status', 'today', 'allowed from'], ...rows], 99)}\n`);
        return;
      }
      case 'revoke': {
        if (!values.prefix) throw new UsageError('keys revoke needs --prefix P');
        const record = store.revokeKey(values.account, values.prefix);
        process.stdout.write(`revoked key ${record.prefix} "${record.name}"\n`);
        return;
      }
      case 'allow': {
        if (!values.prefix || values.from === undefined) throw new UsageError('keys allow needs --prefix P --from CIDR,...');
        const record = store.setAllowed(values.account, values.prefix, cidrList(values.from));
        process.stdout.write(`key ${record.prefix} allowed from ${record.allowed.join(', ') || 'anywhere'}\n`);
        return;
      }
      default:
        throw new UsageError(`unknown keys command "${action ?? ''}"`);
    }
  } finally {
    await store.close();
  }
}

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case 'build':
        await build(rest);
        return 0;
      case 'update':
        await update(rest);
        return 0;
      case 'rollback':
        await rollbackCommand(rest);
        return 0;
      case 'lookup':
        return lookup(rest);
      case 'info':
        info(rest);
        return 0;
      case 'serve':
        await serveCommand(rest, false);
        return 0;
      case 'start':
        await serveCommand(rest, true);
        return 0;
      case 'accounts':
        await accountsCommand(rest);
        return 0;
      case 'openapi':
        process.stdout.write(`${JSON.stringify(openapiDocument(loadPlans()), null, 2)}\n`);
        return 0;
      case 'keys':
        await keysCommand(rest);
        return 0;
      case 'help':
      case '--help':
      case '-h':
        process.stdout.write(`${USAGE}\n`);
        return 0;
      default:
        throw new UsageError(command === undefined ? 'no command given' : `unknown command "${command}"`);
    }
  } catch (error) {
    if (error instanceof UsageError) {
      process.stderr.write(`ipr: ${error.message}\n${USAGE}\n`);
      return 2;
    }
    if (error instanceof IprError) {
      process.stderr.write(`ipr: ${error.message}\n`);
      return 1;
    }
    throw error;
  }
}

process.exitCode = await main(process.argv.slice(2));
