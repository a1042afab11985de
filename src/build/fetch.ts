/**
 * Brings a `url` source to disk: <data>/feeds/<source name>. A download goes
 * to a temporary file and replaces the kept copy only when complete; when it
 * fails, the last good copy is used, with a warning.
 */
import { createWriteStream, existsSync, mkdirSync, renameSync, rmSync } from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { IprError } from '../errors.js';
import type { Source } from './sources.js';

export const FETCH_TIMEOUT_MS = 60_000;
export const MAX_FEED_BYTES = 512 * 1024 * 1024;

export interface Fetched {
  file: string;
  /** Set when the download failed and the last good copy is used instead. */
  warning?: string;
}

export async function fetchSource(source: Source, dataDir: string): Promise<Fetched> {
  const dir = path.join(dataDir, 'feeds');
  mkdirSync(dir, { recursive: true });
  const file = path.join(dir, source.name);
  const part = `${file}.part`;
  try {
    const response = await fetch(source.url!, { signal: AbortSignal.timeout(FETCH_TIMEOUT_MS), redirect: 'follow' });
    if (!response.ok || response.body === null) throw new Error(`HTTP ${response.status}`);
    const declared = Number(response.headers.get('content-length') ?? 0);
    if (declared > MAX_FEED_BYTES) throw new Error(`larger than ${MAX_FEED_BYTES} bytes`);
    let bytes = 0;
    const body = Readable.fromWeb(response.body as import('node:stream/web').ReadableStream);
    body.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
      if (bytes > MAX_FEED_BYTES) body.destroy(new Error(`larger than ${MAX_FEED_BYTES} bytes`));
    });
    await pipeline(body, createWriteStream(part));
    renameSync(part, file);
    return { file };
  } catch (error) {
    rmSync(part, { force: true });
    const cause = (error as Error).cause as Error | undefined;
    const reason = `${(error as Error).message}${cause?.message ? ` (${cause.message})` : ''}`;
    if (existsSync(file)) {
      return { file, warning: `source ${source.name}: ${source.url} could not be fetched (${reason}); using the last good copy` };
    }
    throw new IprError('source_unreadable', `source ${source.name}: ${source.url} could not be fetched (${reason}) and there is no earlier copy`);
  }
}
