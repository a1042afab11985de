/**
 * Structured logs (pino, JSON lines on stderr). Never log a key, a password
 * or a session id: log key prefixes and key ids.
 */
import { pino, destination, type Logger } from 'pino';

export type { Logger };

export function createLogger(bindings: Record<string, unknown> = {}): Logger {
  return pino({ base: { pid: process.pid, ...bindings }, level: process.env.IPR_LOG_LEVEL ?? 'info' }, destination({ dest: 2, sync: true }));
}

/** Bytes an access log gathers before it writes them (sonic-boom caps this below 16 KiB). */
const ACCESS_LOG_BUFFER = 8 * 1024;
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
 * request's fields), appended to FILE through pino's buffered asynchronous
 * destination: lines are written 8 KiB at a time, or after a second at most,
 * so a request pays for its line, not for a system call.
 *
 * The line is formatted here rather than by a pino logger, because every
 * value in it is a number or a text that needs no escaping (a route, a key
 * prefix of URL-safe characters, an address): pino's general serialiser
 * cost about 10 µs of CPU a request, this a small fraction of that
 * (bench/ops.js). Every worker appends to the same file; each write is whole
 * lines, appended atomically (O_APPEND).
 */
export function createAccessLog(file: string, worker: number): AccessLog {
  const dest = destination({ dest: file, append: true, mkdir: true, sync: false, minLength: ACCESS_LOG_BUFFER });
  setInterval(() => dest.flush(), ACCESS_LOG_FLUSH_MS).unref();
  process.once('exit', () => {
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
      dest.write(
        `${head}${Date.now()}${bindings}${id}","route":"${route}","status":${status === 0 ? '"aborted"' : status},"us":${micros}` +
          `${key === null ? '' : `,"key":"${key}"`}${client === null ? '' : `,"client":"${client}"`},"msg":"request"}\n`,
      );
    },
  };
}
