import { DEFAULT_DATABASE_URL } from '../db/database-url.ts';
import { oneOf } from './option-table.ts';

/**
 * The options every long-running process shares (database, logging), in the shape of an option
 * table (see option-table.ts). Each daemon's table includes them; the commands that only read
 * the database take `db` from here.
 */
export const COMMON_OPTIONS = {
  db: {
    env: 'DEFERFLOW_DATABASE_URL',
    default: DEFAULT_DATABASE_URL,
    unit: 'URL',
    describe: 'Database: sqlite:PATH or postgres://USER@HOST:PORT/DB',
  },
  'log-level': {
    env: 'DEFERFLOW_LOG_LEVEL',
    default: 'info',
    unit: 'trace|debug|info|warn|error',
    describe: 'Least severe log level printed',
  },
  'log-format': {
    env: 'DEFERFLOW_LOG_FORMAT',
    default: 'json',
    unit: 'json|pretty',
    describe: 'json: one pino JSON object per line; pretty: coloured lines for humans',
  },
  push: {
    env: 'DEFERFLOW_PUSH',
    default: true,
    unit: 'flag',
    describe:
      'Hear wake-ups and signals pushed by PostgreSQL (LISTEN/NOTIFY) instead of waiting for the next poll; false (--no-push): poll only, e.g. behind a transaction-mode pooler',
  },
} as const;

export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];
export const LOG_FORMATS = ['json', 'pretty'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

export function logLevel(value: unknown): LogLevel {
  return oneOf(value, 'log-level', LOG_LEVELS);
}

export function logFormat(value: unknown): LogFormat {
  return oneOf(value, 'log-format', LOG_FORMATS);
}
