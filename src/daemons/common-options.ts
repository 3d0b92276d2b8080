import type { LogFormat, LogLevel } from '../vocabulary/logging.ts';
import { DEFAULT_DATABASE_URL } from '../database/database-url.ts';
import { Keyring } from '../database/encryption/keyring.ts';
import { InvalidOptionError } from '../vocabulary/errors.ts';
import { QueueNameProblem, queueSetOf, type QueueSet } from '../model/queues.ts';

/**
 * The options every long-running process shares (database, logging), in the shape of an option
 * table keyed by field (see option-table.ts). Each daemon's table includes them; the commands that only read
 * the database take `db` from here.
 */
export const COMMON_OPTIONS = {
  databaseUrl: {
    flag: 'db',
    env: 'DEFERFLOW_DATABASE_URL',
    default: DEFAULT_DATABASE_URL,
    unit: 'URL',
    describe: 'Database: sqlite:PATH or postgres://USER@HOST:PORT/DB',
  },
  encryptionKeysFile: {
    env: 'DEFERFLOW_ENCRYPTION_KEYS_FILE',
    default: '',
    unit: 'path',
    describe:
      'Encrypt trigger kwargs, next_kwargs and event payloads at rest with the keys in this file (ID:BASE64 a line, the first encrypts; see `deferflow db generate-key`). DEFERFLOW_ENCRYPTION_KEYS may list them instead (comma-separated; never a flag, which ps would show). Every daemon needs the same keys',
  },
  logLevel: {
    env: 'DEFERFLOW_LOG_LEVEL',
    default: 'info',
    unit: 'trace|debug|info|warn|error',
    describe: 'Least severe log level printed',
  },
  logFormat: {
    env: 'DEFERFLOW_LOG_FORMAT',
    default: 'json',
    unit: 'json|pretty',
    describe: 'json: one pino JSON object per line; pretty: coloured lines for humans',
  },
  sampleInterval: {
    env: 'DEFERFLOW_SAMPLE_INTERVAL',
    default: 60,
    unit: 'seconds',
    describe: "How often the daemon records its figures for the status page's charts (triggers running, events, slots in use, waiting work); 0: never",
  },
  traces: {
    env: 'DEFERFLOW_TRACES',
    default: 'off',
    unit: 'off|otlp|console',
    describe:
      "Send OpenTelemetry traces (a task instance's tries, deferrals and trigger runs, one trace each): otlp, over HTTP to OTEL_EXPORTER_OTLP_ENDPOINT (needs the @opentelemetry/api, sdk-trace-base, resources and exporter-trace-otlp-http packages); console: printed; off: none",
  },
  push: {
    env: 'DEFERFLOW_PUSH',
    default: true,
    unit: 'flag',
    describe:
      "Hear wake-ups and signals pushed by PostgreSQL (LISTEN/NOTIFY), or other processes' commits to a SQLite file, instead of waiting for the next poll; false (--no-push): poll only, e.g. behind a transaction-mode pooler",
  },
} as const;

/** The environment variable that may hold the keys themselves (comma-separated ID:BASE64). */
export const ENCRYPTION_KEYS_ENV = 'DEFERFLOW_ENCRYPTION_KEYS';

/** A process's keyring: the keys in DEFERFLOW_ENCRYPTION_KEYS, then those in the keys file. */
export function keyringOf(keysFile: unknown, env: NodeJS.ProcessEnv): Keyring {
  const fromEnv = (env[ENCRYPTION_KEYS_ENV] ?? '')
    .split(',')
    .map((entry) => entry.trim())
    .filter((entry) => entry !== '');
  return Keyring.load(fromEnv, typeof keysFile === 'string' && keysFile !== '' ? keysFile : undefined);
}

/** What every daemon's resolved options hold of COMMON_OPTIONS: the database, the keys and logging. */
export interface ResolvedCommonOptions {
  /** The database URL. */
  readonly databaseUrl: string;
  /** Encryption at rest: the keys that seal and open secret-bearing values (Keyring.none: none). */
  readonly keyring: Keyring;
  /** The least severe level logged. */
  readonly logLevel: LogLevel;
  /** JSON lines, or pretty lines. */
  readonly logFormat: LogFormat;
  /** How often the daemon records its figures for the charts, in ms; 0: never. */
  readonly sampleIntervalMs: number;
  /** Where the process's traces go; off: none (see tracing.ts). */
  readonly traces: TracesExporter;
}

/** `--traces`: where a CLI process's spans go (an embedded process may give an exporter of its own). */
export const TRACES_EXPORTERS = ['off', 'otlp', 'console'] as const;
/** One of TRACES_EXPORTERS. */
export type TracesExporter = (typeof TRACES_EXPORTERS)[number];

/** `--queues` (a worker's or a triggerer's) checked: DF_INVALID_OPTION naming the bad name. */
export function queuesOption(value: unknown): QueueSet {
  try {
    return queueSetOf(value);
  } catch (error) {
    if (error instanceof QueueNameProblem) throw new InvalidOptionError('queues', error.message);
    throw error;
  }
}
