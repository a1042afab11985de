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
import { closeSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
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

/** Whether process `pid` is alive (a lock or a partial file of a dead one may be taken over). */
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

/** Makes a rename or creation in `dir` durable. */
export function syncDir(dir: string): void {
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

const LOCK = 'lock';

/**
 * Runs `work` holding the data folder's lock (<data>/lock, holding the pid):
 * one build, update or rollback at a time, whichever process runs it, so two
 * never write the same feed copy or race to publish. A lock left by a process
 * that no longer runs is taken over. A data folder made for the lock and left
 * empty (a first build that failed) is removed again.
 */
export async function withDataLock<T>(dataDir: string, work: () => Promise<T>): Promise<T> {
  const made = mkdirSync(dataDir, { recursive: true }) !== undefined;
  const file = path.join(dataDir, LOCK);
  for (let tries = 0; ; tries++) {
    try {
      writeFileSync(file, `${process.pid}\n`, { flag: 'wx' });
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      let pid = 0;
      try {
        pid = Number(readFileSync(file, 'utf8').trim());
      } catch {
        // released meanwhile: try again
      }
      if (tries > 2 || (Number.isInteger(pid) && pid > 0 && running(pid))) {
        throw new IprError('data_busy', `${dataDir}: another build, update or rollback is running (pid ${pid}; ${file} names it)`);
      }
      rmSync(file, { force: true });
    }
  }
  try {
    return await work();
  } finally {
    rmSync(file, { force: true });
    if (made && readdirSync(dataDir).length === 0) rmdirSync(dataDir);
  }
}

/** Written by a rollback: updates leave the rolled-back-to snapshot alone until forced (update.ts). */
export interface Hold {
  at: string;
  /** The snapshot rolled back from, and the one published instead. */
  from: string;
  to: string;
}

function holdFile(dataDir: string): string {
  return path.join(snapshotsDir(dataDir), 'HOLD');
}

export function readHold(dataDir: string): Hold | null {
  try {
    return JSON.parse(readFileSync(holdFile(dataDir), 'utf8')) as Hold;
  } catch {
    return null;
  }
}

export function clearHold(dataDir: string): void {
  rmSync(holdFile(dataDir), { force: true });
}

/** The build time a snapshot's file name carries (newSnapshotPath), as an ISO date. */
export function builtAtOfName(name: string): string {
  const m = /^snap-([0-9]{4})([0-9]{2})([0-9]{2})T([0-9]{2})([0-9]{2})([0-9]{2})([0-9]{3})Z/.exec(name);
  return m ? `${m[1]}-${m[2]}-${m[3]}T${m[4]}:${m[5]}:${m[6]}.${m[7]}Z` : '';
}

/**
 * `ipr rollback`: publishes the newest snapshot older than the published one
 * and holds updates (a scheduled update would otherwise rebuild the data
 * rolled back from at once). The caller holds the data folder's lock.
 */
export function rollback(dataDir: string): Hold {
  const current = publishedName(dataDir);
  if (current === null) throw new IprError('snapshot_missing', `${snapshotsDir(dataDir)}: no snapshot is published`);
  const earlier = readdirSync(snapshotsDir(dataDir))
    .filter((n) => SNAPSHOT_PATTERN.test(n) && n < current)
    .sort()
    .pop();
  if (earlier === undefined) {
    throw new IprError('no_earlier_snapshot', `${snapshotsDir(dataDir)}: no snapshot older than ${current} is kept (--keep N keeps N)`);
  }
  publish(dataDir, path.join(snapshotsDir(dataDir), earlier));
  const hold: Hold = { at: new Date().toISOString(), from: current, to: earlier };
  writeFileSync(holdFile(dataDir), `${JSON.stringify(hold)}\n`);
  return hold;
}
