// What the benchmarks share for reporting: where a result was measured (date,
// CPU, cores, Node version, commit) and medians.
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

export function environment() {
  let commit = 'unknown';
  try {
    commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: root, encoding: 'utf8' }).trim();
  } catch {}
  return { date: new Date().toISOString(), cpu: os.cpus()[0]?.model ?? 'unknown', cores: os.cpus().length, node: process.version, commit };
}

export function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}
