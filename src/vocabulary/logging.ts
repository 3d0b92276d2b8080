import pino, { type Logger } from 'pino';
import type PinoPretty from 'pino-pretty';
import { lazyPackage } from './lazy-package.ts';
import { oneOf } from './options/option-table.ts';

export type { Logger } from 'pino';

export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
/** A pino log level. */
export type LogLevel = (typeof LOG_LEVELS)[number];
export const LOG_FORMATS = ['json', 'pretty'] as const;
/** How logs are written: JSON lines, or pretty single lines. */
export type LogFormat = (typeof LOG_FORMATS)[number];

/** A --log-level value, or DF_INVALID_OPTION naming the levels. */
export function logLevel(value: unknown): LogLevel {
  return oneOf(value, 'logLevel', LOG_LEVELS);
}

/** A log format (--log-format, logFormat), or DF_INVALID_OPTION naming the formats. */
export function logFormat(value: unknown): LogFormat {
  return oneOf(value, 'logFormat', LOG_FORMATS);
}

const pretty = lazyPackage<typeof PinoPretty>('pino-pretty');

/**
 * pino to stdout (or stderr with `stderr: true`, when stdout shows something else). Writes are synchronous so nothing is lost when the process exits right after
 * logging (a signal, a fatal error); the hot path logs nothing per trigger at info level.
 */
export function createLogger(options: {
  level: LogLevel;
  format: LogFormat;
  name?: string;
  stderr?: boolean;
  /** Where each line goes instead of stdout or stderr (standalone's progress screen); pretty lines are coloured. */
  write?: (line: string) => void;
}): Logger {
  const base = { level: options.level, name: options.name ?? 'deferflow' };
  const { write } = options;
  if (write) {
    if (options.format !== 'pretty') return pino(base, { write });
    const prettify = pretty().prettyFactory({ colorize: true, singleLine: true, translateTime: 'SYS:HH:MM:ss.l' });
    return pino(base, { write: (line: string) => write(prettify(JSON.parse(line) as Record<string, unknown>)) });
  }
  const fd = options.stderr ? 2 : 1;
  if (options.format === 'pretty') {
    const stream = options.stderr ? process.stderr : process.stdout;
    return pino(base, pretty()({ colorize: stream.isTTY ?? false, sync: true, translateTime: 'SYS:HH:MM:ss.l', destination: fd }));
  }
  return pino(base, pino.destination({ dest: fd, sync: true }));
}
