import pino, { type Logger } from 'pino';
import pretty from 'pino-pretty';
import type { LogFormat, LogLevel } from './triggerer/options.ts';

export type { Logger } from 'pino';

/**
 * pino to stdout. Writes are synchronous so nothing is lost when the process exits right after
 * logging (a signal, a fatal error); the hot path logs nothing per trigger at info level.
 */
export function createLogger(options: { level: LogLevel; format: LogFormat; name?: string }): Logger {
  const base = { level: options.level, name: options.name ?? 'deferflow' };
  if (options.format === 'pretty') {
    return pino(base, pretty({ colorize: process.stdout.isTTY ?? false, sync: true, translateTime: 'SYS:HH:MM:ss.l' }));
  }
  return pino(base, pino.destination({ dest: 1, sync: true }));
}
