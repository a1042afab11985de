/**
 * Publication of snapshots in a data folder:
 *
 *   <data>/snapshots/snap-<UTC time>-<random>.mdb   immutable snapshot files
 *   <data>/snapshots/CURRENT                         the name of the published one
 *
 * A new file is written completely and synced before CURRENT is replaced
 * (write, sync, rename, sync the folder), so a reader sees the old snapshot or
 * the new one, never a partial file; a build that dies leaves at most an
 * unreferenced file, removed by a later prune. The native reader
 * (native/src/store.h) follows the same layout.
 */
import { randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';

export const SNAPSHOT_PATTERN = /^snap-[0-9]{8}T[0-9]{9}Z-[0-9a-f]{8}\.mdb$/;

export function snapshotsDir(dataDir: string): string {
  return path.join(dataDir, 'snapshots');
}

/** A fresh, unique file name for a snapshot built at `when`; names sort by time. */
export function newSnapshotPath(dataDir: string, when: Date): string {
  const dir = snapshotsDir(dataDir);
  mkdirSync(dir, { recursive: true });
  const stamp = when.toISOString().replace(/[-:.]/g, '').replace(/Z$/, 'Z');
  return path.join(dir, `snap-${stamp}-${randomBytes(4).toString('hex')}.mdb`);
}

function syncDir(dir: string): void {
  const fd = openSync(dir, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** The file name CURRENT holds, or null when nothing is published. */
export function publishedName(dataDir: string): string | null {
  try {
    const name = readFileSync(path.join(snapshotsDir(dataDir), 'CURRENT'), 'utf8').trim();
    return SNAPSHOT_PATTERN.test(name) ? name : null;
  } catch {
    return null;
  }
}

/** Makes `file` (inside the snapshots folder) the published snapshot, atomically. */
export function publish(dataDir: string, file: string): void {
  const dir = snapshotsDir(dataDir);
  const temp = path.join(dir, `CURRENT.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
  const fd = openSync(temp, 'w');
  try {
    writeFileSync(fd, `${path.basename(file)}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(temp, path.join(dir, 'CURRENT'));
  syncDir(dir);
}

/**
 * Removes snapshot files older than the published one beyond the newest
 * `keep` of them (the published one always stays; newer files may be builds
 * in progress and stay too). Returns the removed names.
 */
export function prune(dataDir: string, keep: number): string[] {
  const dir = snapshotsDir(dataDir);
  const current = publishedName(dataDir);
  if (current === null) return [];
  const older = readdirSync(dir)
    .filter((n) => SNAPSHOT_PATTERN.test(n) && n < current)
    .sort()
    .reverse();
  const removed = older.slice(Math.max(0, keep - 1));
  for (const name of removed) rmSync(path.join(dir, name), { force: true });
  return removed;
}
