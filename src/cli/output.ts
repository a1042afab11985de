/**
 * How commands print: aligned tables, byte sizes, the build's progress bar
 * (redrawn on a terminal, a line per step in a log) and its summary.
 */
import type { BuildProgress, BuildSummary } from '../pipeline/build.js';
import { terminalSafe } from '../text.js';

export function formatBytes(bytes: number): string {
  return bytes >= 1 << 20 ? `${(bytes / (1 << 20)).toFixed(1)} MiB` : `${(bytes / 1024).toFixed(1)} KiB`;
}

/**
 * Rows as aligned columns; numbers with thousands separators; columns from
 * `rightFrom` on aligned right. Cells hold customers' text (key names,
 * emails): escaped for the terminal (text.ts).
 */
export function table(rows: (string | number)[][], rightFrom: number): string {
  const text = rows.map((r) => r.map((c) => (typeof c === 'number' ? c.toLocaleString('en-US') : terminalSafe(c))));
  const widths = text[0]!.map((_, i) => Math.max(...text.map((r) => r[i]!.length)));
  return text.map((r) => r.map((c, i) => (i >= rightFrom ? c.padStart(widths[i]!) : c.padEnd(widths[i]!))).join('  ').trimEnd()).join('\n');
}

function bar(fraction: number, width = 30): string {
  const filled = Math.round(fraction * width);
  return `${'#'.repeat(filled)}${'.'.repeat(width - filled)}`;
}

/** Clears a progress line left on a terminal. */
export function endProgress(): void {
  if (process.stderr.isTTY) process.stderr.write('\r\x1b[K');
}

export function progressPrinter(): (event: BuildProgress) => void {
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

export function warningPrinter(): (message: string) => void {
  return (message) => process.stderr.write(`${process.stderr.isTTY ? '\r\x1b[K' : ''}warning: ${terminalSafe(message)}\n`);
}

export function printSummary(s: BuildSummary): void {
  const sources = [
    ['source', 'kind', 'format', 'records', 'bad lines', 'left out', 'seconds'],
    ...s.sources.map((x) => [x.name, x.kind, x.format, x.skipped ? 'skipped' : x.records, x.bad_lines, x.left_out ?? 0, x.seconds.toFixed(2)]),
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
