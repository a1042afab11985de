#!/usr/bin/env node
/**
 * `ipr`: the operator's command line. `ipr help` lists the commands.
 */
import { parseArgs } from 'node:util';
import { buildSnapshot, type BuildProgress, type BuildSummary } from './build/build.js';
import { IprError } from './errors.js';
import { openSnapshot } from './snapshot.js';

const USAGE = `usage: ipr <command> [options]

  build  --sources FILE [--data DIR] [--keep N] [--skip-unreachable]
         Build a snapshot from the sources configuration FILE and publish it in DIR.
  lookup IP... [--data DIR]
         Print the check result of each address, as the API answers it.
  info   [--data DIR]
         Print the published snapshot's metadata: sources, counts, build time.

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
  return text.map((r) => r.map((c, i) => (i >= rightFrom ? c.padStart(widths[i]!) : c.padEnd(widths[i]!))).join('  ')).join('\n');
}

function progressPrinter(): (event: BuildProgress) => void {
  const tty = process.stderr.isTTY;
  let lastSource = -1;
  return (event) => {
    if (event.phase !== 'source') {
      process.stderr.write(`${tty ? '\r\x1b[K' : ''}${event.phase === 'compile' ? 'compiling tries' : 'writing snapshot'}...\n`);
      return;
    }
    const label = `[${event.index + 1}/${event.total}] ${event.source}`;
    if (tty) {
      const width = 30;
      const filled = Math.round(event.fraction * width);
      process.stderr.write(`\r\x1b[K${label.padEnd(40)} ${'#'.repeat(filled)}${'.'.repeat(width - filled)} ${Math.round(event.fraction * 100)}%`);
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

async function build(args: string[]): Promise<void> {
  const { values } = options(args, {
    sources: { type: 'string' },
    keep: { type: 'string' },
    'skip-unreachable': { type: 'boolean' },
  });
  if (!values.sources) throw new UsageError('build needs --sources FILE');
  const keep = values.keep === undefined ? undefined : Number(values.keep);
  if (keep !== undefined && !(Number.isInteger(keep) && keep >= 0)) throw new UsageError('--keep takes a whole number');
  const summary = await buildSnapshot({
    sources: values.sources,
    dataDir: values.data ?? 'data',
    ...(keep === undefined ? {} : { keep }),
    skipUnreachable: values['skip-unreachable'] === true,
    onProgress: progressPrinter(),
    onWarning: (message) => process.stderr.write(`${process.stderr.isTTY ? '\r\x1b[K' : ''}warning: ${message}\n`),
  });
  if (process.stderr.isTTY) process.stderr.write('\r\x1b[K');
  printSummary(summary);
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
    process.stdout.write(`${JSON.stringify(snapshot.info(), null, 2)}\n`);
  } finally {
    snapshot.close();
  }
}

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      case 'build':
        await build(rest);
        return 0;
      case 'lookup':
        return lookup(rest);
      case 'info':
        info(rest);
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
