/**
 * Structured logs (pino, JSON lines on stderr). Never log a key, a password
 * or a session id: log key prefixes and key ids.
 */
import { pino, destination, type Logger } from 'pino';
import { PRIVATE_FILE_MODE } from './private-files.js';

export type { Logger };

export function createLogger(bindings: Record<string, unknown> = {}): Logger {
  return pino({ base: { pid: process.pid, ...bindings }, level: process.env.IPR_LOG_LEVEL ?? 'info' }, destination({ dest: 2, sync: true }));
}

/** Bytes of lines an access log gathers before it hands them to be written (below sonic-boom's 16 KiB writes). */
const ACCESS_LOG_BATCH = 8 * 1024;
const ACCESS_LOG_FLUSH_MS = 1000;

/** One worker thread's access log. */
export interface AccessLog {
  /**
   * Appends the line of one answered request: `status` 0 when its client went
   * away first, `key` the prefix of its valid key (never the key), `client`
   * its address.
   */
  request(id: string, route: string, status: number, micros: number, key: string | null, client: string | null): void;
}

/**
 * The access log of one worker thread (`ipr serve --access-log FILE`): a JSON
 * line per request, in pino's line format (level, time, pid, worker, then the
 * request's fields), appended to FILE through pino's asynchronous destination.
 *
 * Two costs are avoided, both measured at several microseconds of CPU a
 * request (bench/ops.js): pino's general serialiser (every value here is a
 * number or a text that needs no escaping: a route, a key prefix of URL-safe
 * characters, an address), and handing the destination one line at a time
 * (it measures its whole pending buffer on every write). Lines are gathered
 * here and handed over 8 KiB at a time, or after a second at most. Every
 * worker appends to the same file; each write is whole lines, appended
 * atomically (O_APPEND).
 */
export function createAccessLog(file: string, worker: number): AccessLog {
  // It names clients and keys' prefixes: the server's user only (serve.ts tightens an older file).
  const dest = destination({ dest: file, append: true, mkdir: true, sync: false, mode: PRIVATE_FILE_MODE });
  let lines: string[] = [];
  let bytes = 0;
  const handOver = () => {
    if (lines.length === 0) return;
    dest.write(lines.join(''));
    lines = [];
    bytes = 0;
  };
  setInterval(handOver, ACCESS_LOG_FLUSH_MS).unref();
  process.once('exit', () => {
    handOver();
    try {
      dest.flushSync(); // the thread's last lines
    } catch {
      // the file never opened: nothing was written to it
    }
  });
  const head = `{"level":30,"time":`;
  const bindings = `,"pid":${process.pid},"worker":${worker},"req":"`;
  return {
    request(id, route, status, micros, key, client) {
      const line =
        `${head}${Date.now()}${bindings}${id}","route":"${route}","status":${status === 0 ? '"aborted"' : status},"us":${micros}` +
        `${key === null ? '' : `,"key":"${key}"`}${client === null ? '' : `,"client":"${client}"`},"msg":"request"}\n`;
      lines.push(line);
      bytes += line.length; // ASCII: characters are bytes
      if (bytes >= ACCESS_LOG_BATCH) handOver();
    },
  };
}
