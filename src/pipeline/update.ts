/**
 * `ipr update`: brings every source up to date (fetch.ts: conditional
 * requests, retries, the last good copy standing in for a failed or refused
 * download), then builds and publishes a snapshot, unless the published one
 * was built from exactly these inputs, or a rollback holds updates.
 */
import { openSnapshot } from '../snapshot.js';
import { buildFromInputs, collectInputs, type BuildOptions, type BuildSummary, type Inputs } from './build.js';
import { publishedName, readHold, withDataLock, type Hold } from './publish.js';
import { origin } from './sources.js';

export interface UpdateOptions extends BuildOptions {
  /** Build and publish even when nothing changed, and even while a rollback holds updates. */
  force?: boolean;
}

/** What became of one source in an update. */
export interface SourceOutcome {
  name: string;
  location: string;
  /**
   * downloaded: a new copy; not_modified: the upstream answered 304;
   * last_good_copy: the new copy could not be had or was refused (see reason);
   * local: a path or package file, read in place; skipped: unreachable, left out.
   */
  status: 'downloaded' | 'not_modified' | 'last_good_copy' | 'local' | 'skipped';
  reason?: string;
}

export type UpdateResult =
  | { result: 'published'; summary: BuildSummary; sources: SourceOutcome[]; seconds: number }
  | { result: 'unchanged'; snapshot: string; sources: SourceOutcome[]; seconds: number }
  | { result: 'held'; hold: Hold; seconds: number };

function outcomes(inputs: Inputs): SourceOutcome[] {
  return inputs.sources.map(({ source, provenance, skipped }) => {
    const base = { name: source.name, location: origin(source) };
    if (skipped !== undefined) return { ...base, status: 'skipped', reason: skipped };
    if (provenance === null || !('http_status' in provenance)) return { ...base, status: 'local' };
    if (provenance.used_last_good_copy) return { ...base, status: 'last_good_copy', reason: provenance.reason! };
    return { ...base, status: provenance.http_status === 304 ? 'not_modified' : 'downloaded' };
  });
}

/** The `inputs` fingerprint of the published snapshot, or null when there is none. */
function publishedInputs(dataDir: string): { snapshot: string; inputs: unknown } | null {
  if (publishedName(dataDir) === null) return null;
  try {
    const snapshot = openSnapshot(dataDir);
    try {
      const info = snapshot.info();
      return { snapshot: info.path, inputs: info.meta.inputs };
    } finally {
      snapshot.close();
    }
  } catch {
    return null; // unreadable: build a new one
  }
}

export async function updateSnapshot(options: UpdateOptions): Promise<UpdateResult> {
  const started = process.hrtime.bigint();
  const seconds = () => Number(process.hrtime.bigint() - started) / 1e9;
  return withDataLock(options.dataDir, async (): Promise<UpdateResult> => {
    const hold = readHold(options.dataDir);
    if (hold !== null && !options.force) return { result: 'held', hold, seconds: seconds() };
    const inputs = await collectInputs(options);
    const published = options.force ? null : publishedInputs(options.dataDir);
    if (published !== null && published.inputs === inputs.fingerprint) {
      return { result: 'unchanged', snapshot: published.snapshot, sources: outcomes(inputs), seconds: seconds() };
    }
    const summary = await buildFromInputs(inputs, options);
    return { result: 'published', summary, sources: outcomes(inputs), seconds: seconds() };
  });
}
