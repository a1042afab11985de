/**
 * Publication of snapshots in a data folder:
 *
 *   <data>/snapshots/snap-<UTC time>-<random>.mdb   immutable snapshot files
 *   <data>/snapshots/CURRENT                         the name of the published one
 *
 * A new file is written completely under a partial name and synced, renamed,
 * and only then is CURRENT replaced (write, sync, rename, sync the folder), so
 * a reader sees the old snapshot or the new one, never a partial file. A
 * build that fails removes what it wrote; one that is killed leaves files
 * named after its process id (`*.<pid>.partial`, `CURRENT.<pid>.*.tmp`),
 * which the next build removes once that process is gone. The native reader
 * (native/src/store.h) follows the same layout.
 */
import { randomBytes } from 'node:crypto';
import { closeSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { IprError } from '../errors.js';

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

/** Where this process writes the snapshot that will be `file`. */
export function partialPath(file: string): string {
  return `${file}.${process.pid}.partial`;
}

/** A partial snapshot or a CURRENT being replaced, with the id of the process writing it. */
const IN_PROGRESS = /^(?:snap-[0-9]{8}T[0-9]{9}Z-[0-9a-f]{8}\.mdb\.([0-9]+)\.partial|CURRENT\.([0-9]+)\.[0-9a-f]{8}\.tmp)$/;

function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Removes the files that builds killed on the way left in the snapshots
 * folder (their process is no longer running); returns their names.
 */
export function removeAbandoned(dataDir: string): string[] {
  const dir = snapshotsDir(dataDir);
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return [];
  }
  const removed: string[] = [];
  for (const name of names) {
    const match = IN_PROGRESS.exec(name);
    if (match === null || running(Number(match[1] ?? match[2]))) continue;
    rmSync(path.join(dir, name), { force: true });
    removed.push(name);
  }
  return removed;
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

/**
 * Makes `file` (inside the snapshots folder) the published snapshot,
 * atomically. Throws IprError write_failed (the previous one stays published).
 */
export function publish(dataDir: string, file: string): void {
  const dir = snapshotsDir(dataDir);
  const temp = path.join(dir, `CURRENT.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
  try {
    const fd = openSync(temp, 'w');
    try {
      writeFileSync(fd, `${path.basename(file)}\n`);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    renameSync(temp, path.join(dir, 'CURRENT'));
    syncDir(dir);
  } catch (error) {
    rmSync(temp, { force: true });
    const previous = publishedName(dataDir);
    throw new IprError(
      'write_failed',
      `snapshot ${file}: publishing failed: ${(error as Error).message}; ${previous === null ? 'nothing is published' : `${previous} stays published`}`,
    );
  }
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
