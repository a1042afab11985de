// What every benchmark reports with its figures, and how it reduces rounds.
import { execFileSync } from 'node:child_process';
import os from 'node:os';

/** Date, CPU, cores, Node version and commit of a run. */
export function environment(root) {
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
