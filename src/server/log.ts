/**
 * Structured logs (pino, JSON lines on stderr). Never log a key, a password
 * or a session id: log key prefixes and key ids.
 */
import { pino, destination, type Logger } from 'pino';

export type { Logger };

export function createLogger(bindings: Record<string, unknown> = {}): Logger {
  return pino({ base: { pid: process.pid, ...bindings }, level: process.env.IPR_LOG_LEVEL ?? 'info' }, destination({ dest: 2, sync: true }));
}
