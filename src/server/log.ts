/**
 * Structured logs (pino, JSON lines on stderr). Never log a key, a password
 * or a session id: log key prefixes and key ids.
 */
import { pino, destination, type Logger } from 'pino';

export type { Logger };

export function createLogger(bindings: Record<string, unknown> = {}): Logger {
  return pino({ base: { pid: process.pid, ...bindings }, level: process.env.IPR_LOG_LEVEL ?? 'info' }, destination({ dest: 2, sync: true }));
}

/** Bytes an access log gathers before it writes them. */
const ACCESS_LOG_BUFFER = 8 * 1024;
const ACCESS_LOG_FLUSH_MS = 1000;

/**
 * The access log of one worker thread (`ipr serve --access-log FILE`): a JSON
 * line per request, appended to FILE. Lines are buffered and written 8 KiB at
 * a time, or after a second at most, asynchronously: a request pays for
 * formatting its line, not for a system call. Every worker appends to the same
 * file; each write is whole lines, appended atomically (O_APPEND).
 */
export function createAccessLog(file: string, bindings: Record<string, unknown>): Logger {
  const dest = destination({ dest: file, append: true, mkdir: true, sync: false, minLength: ACCESS_LOG_BUFFER });
  setInterval(() => dest.flush(), ACCESS_LOG_FLUSH_MS).unref();
  process.once('exit', () => dest.flushSync()); // the thread's last lines
  return pino({ base: { pid: process.pid, ...bindings }, level: 'info' }, dest);
}
