import type { Keyring } from '../../database/encryption/keyring.ts';
import os from 'node:os';
import { COMMON_OPTIONS, keyringOf, TRACES_EXPORTERS, type ResolvedCommonOptions } from '../common-options.ts';
import { logFormat, logLevel } from '../../vocabulary/logging.ts';
import { InvalidOptionError } from '../../vocabulary/errors.ts';
import { flag, nonNegativeSeconds, oneOf, optionPicker, positiveInteger, positiveNumber, seconds } from '../../vocabulary/options/option-table.ts';
import { tokenOption } from '../../vocabulary/options/tokens.ts';
import { HTTP_OPTIONS } from '../../services/observability/options.ts';
import { DEFAULT_QUEUE, type QueueSet } from '../../model/queues.ts';
import { queuesOption } from '../common-options.ts';
import { HEALTH_CHECK_THRESHOLD_OPTION } from '../liveness-options.ts';

/** The triggerer's HTTP port when a signal token is set and --http-port is not given (off otherwise). */
export const TRIGGERER_SIGNAL_HTTP_PORT = 8795;

/**
 * Every triggerer option, in one place, keyed by the field of the typed TriggererConfig
 * (src/app/config.ts, whose JSDoc gives its meaning and @default; the compiler holds the names
 * together and a test the defaults): its environment variable, default and unit. The CLI derives
 * each flag (the field in kebab case) and its --help line from this table; docs/configuration.md
 * is tested against it. Options go raw (flags and env, strings or numbers) → defaulted →
 * validated and frozen. A flag wins over its environment variable, which wins over the default.
 */
export const TRIGGERER_OPTIONS = {
  databaseUrl: COMMON_OPTIONS.databaseUrl,
  encryptionKeysFile: COMMON_OPTIONS.encryptionKeysFile,
  capacity: {
    env: 'DEFERFLOW_TRIGGERER_CAPACITY',
    default: 1000,
    unit: 'triggers',
    describe: 'Most triggers this triggerer runs at once; it claims no more',
  },
  queues: {
    env: 'DEFERFLOW_TRIGGERER_QUEUES',
    default: DEFAULT_QUEUE,
    unit: 'queue names (comma-separated)',
    describe:
      'Queues whose triggers this triggerer runs (a trigger is in the queue of the task that deferred on it); default is the queue of tasks that name none, and may be listed with others',
  },
  heartbeatInterval: {
    env: 'DEFERFLOW_TRIGGERER_HEARTBEAT_INTERVAL',
    default: 5,
    unit: 'seconds',
    describe: 'How often the triggerer records that it is alive',
  },
  healthCheckThreshold: HEALTH_CHECK_THRESHOLD_OPTION,
  // As many as one claim statement takes (the pass claims in statements of at most 1,000 rows,
  // letting due triggers fire in between): a peer's triggers, released on its stop or its death,
  // are claimed in one pass. bench:failover on PostgreSQL, 1,000 triggers: release to all running
  // 422 ms (p50) at 50 a pass, 155 ms at 1,000; a kill to all running 549 ms, 205 ms.
  claimsPerLoop: {
    env: 'DEFERFLOW_TRIGGERER_CLAIMS_PER_LOOP',
    default: 1000,
    unit: 'triggers',
    describe: 'Most unowned triggers claimed in one pass (a full batch starts the next pass at once)',
  },
  pollInterval: {
    env: 'DEFERFLOW_TRIGGERER_POLL_INTERVAL',
    default: 1,
    unit: 'seconds',
    describe: 'Pause between passes (claim, hand over, clean up) when there is nothing more to claim',
  },
  blockThreshold: {
    env: 'DEFERFLOW_TRIGGERER_BLOCK_THRESHOLD',
    default: 200,
    unit: 'milliseconds',
    describe: 'A trigger step holding the event loop longer than this is logged as a warning naming it',
  },
  watchdogLimit: {
    env: 'DEFERFLOW_TRIGGERER_WATCHDOG_LIMIT',
    default: 10,
    unit: 'seconds',
    describe:
      'A watchdog thread restarts the process (SIGKILL; its supervisor starts it again) once a step has held the event loop this long, recording the trigger whose step it was; 0: no watchdog',
  },
  quarantineAfter: {
    env: 'DEFERFLOW_TRIGGERER_QUARANTINE_AFTER',
    default: 2,
    unit: 'times',
    describe: 'A trigger the watchdog recorded this many times is quarantined: never run again, its task instances failed (DF_TRIGGER_QUARANTINED)',
  },
  signalRetention: {
    env: 'DEFERFLOW_SIGNAL_RETENTION',
    default: 7 * 24 * 3600,
    unit: 'seconds',
    describe: "Signals older than this are pruned (each key's latest is kept, and versions keep rising)",
  },
  signalHttpToken: {
    env: 'DEFERFLOW_SIGNAL_HTTP_TOKEN',
    default: '',
    unit: 'text, 16 characters or more',
    describe:
      "Serve POST /signals/:key on the process's HTTP endpoint (--http-port; the triggerer's default becomes 8795), refusing requests without this bearer token (off when unset; prefer the env var: a flag shows in ps)",
  },
  triggerModules: {
    flag: 'trigger-module',
    env: 'DEFERFLOW_TRIGGER_MODULES',
    default: [] as string[],
    unit: 'paths or packages (env: comma-separated)',
    describe: 'Module whose exported BaseTrigger classes this triggerer may run (repeatable; built-ins always allowed)',
  },
  ...HTTP_OPTIONS,
  sampleInterval: COMMON_OPTIONS.sampleInterval,
  traces: COMMON_OPTIONS.traces,
  push: COMMON_OPTIONS.push,
  logLevel: COMMON_OPTIONS.logLevel,
  logFormat: COMMON_OPTIONS.logFormat,
} as const;

export type TriggererOptionName = keyof typeof TRIGGERER_OPTIONS;
export type RawTriggererOptions = Partial<Record<TriggererOptionName, string | number | boolean | readonly string[] | undefined>>;

/** The triggerer's options with every default applied, as resolveTriggererOptions returns them. */
export interface TriggererOptions extends ResolvedCommonOptions {
  /** Most triggers it runs at once. */
  readonly capacity: number;
  /** The queues whose triggers it claims (see src/model/queues.ts). */
  readonly queues: QueueSet;
  /** How often it heartbeats its job row, in ms. */
  readonly heartbeatIntervalMs: number;
  /** A triggerer silent this long is dead (its triggers are released), in ms. */
  readonly healthCheckThresholdMs: number;
  /** Most unowned triggers claimed in one pass. */
  readonly claimsPerLoop: number;
  /** Pause between passes with nothing more to claim, in ms. */
  readonly pollIntervalMs: number;
  /** A trigger step holding the loop longer than this (ms) is logged by name. */
  readonly blockThresholdMs: number;
  /** Held this long, the event loop is restarted by the watchdog; 0: no watchdog. */
  readonly watchdogLimitMs: number;
  /** Watchdog records after which a trigger is quarantined. */
  readonly quarantineAfter: number;
  /** Modules whose trigger classes it may run. */
  readonly triggerModules: readonly string[];
  /** Signals sent longer ago than this are pruned at cleanup, each key's latest kept. */
  readonly signalRetentionMs: number;
  /** Listen for pushed wake-ups and signals (PostgreSQL LISTEN/NOTIFY); false: poll only. */
  readonly push: boolean;
  /** The signal endpoint (POST /signals/:key); null (no token set): not served. */
  /** The bearer token POST /signals/:key requires on the process's HTTP endpoint; null: not served. */
  readonly signalHttpToken: string | null;
  /** Longest a deferral may stay past its trigger_timeout: the timeout sweep's period. */
  readonly timeoutSweepMs: number;
  /** How often triggers no task instance points at are deleted. */
  readonly cleanupIntervalMs: number;
  /** What a graceful stop waits for triggers' cleanup() before handing over anyway. */
  readonly cleanupGraceMs: number;
  /** The host its job row names. */
  readonly hostname: string;
}

/** raw → defaulted → validated and frozen. `keyring`: the process's, when it is loaded already (standalone, an embedded config), so the keys are read once; otherwise loaded here from DEFERFLOW_ENCRYPTION_KEYS and the keys file. */
export function resolveTriggererOptions(raw: RawTriggererOptions = {}, env: NodeJS.ProcessEnv = process.env, keyring?: Keyring): TriggererOptions {
  const pick = optionPicker(TRIGGERER_OPTIONS, raw, env);
  const heartbeatIntervalMs = seconds(pick('heartbeatInterval'), 'heartbeatInterval');
  const healthCheckThresholdMs = seconds(pick('healthCheckThreshold'), 'healthCheckThreshold');
  if (healthCheckThresholdMs <= heartbeatIntervalMs) {
    throw new InvalidOptionError(
      'healthCheckThreshold',
      `must be longer than heartbeat-interval (${heartbeatIntervalMs / 1000} s), or live triggerers would look dead between heartbeats`,
    );
  }
  const pollIntervalMs = seconds(pick('pollInterval'), 'pollInterval');
  const modules = pick('triggerModules');
  const options: TriggererOptions = {
    databaseUrl: String(pick('databaseUrl')),
    keyring: keyring ?? keyringOf(pick('encryptionKeysFile'), env),
    capacity: positiveInteger(pick('capacity'), 'capacity'),
    queues: queuesOption(pick('queues')),
    heartbeatIntervalMs,
    healthCheckThresholdMs,
    claimsPerLoop: positiveInteger(pick('claimsPerLoop'), 'claimsPerLoop'),
    pollIntervalMs,
    blockThresholdMs: positiveNumber(pick('blockThreshold'), 'blockThreshold'),
    watchdogLimitMs: nonNegativeSeconds(pick('watchdogLimit'), 'watchdogLimit'),
    quarantineAfter: positiveInteger(pick('quarantineAfter'), 'quarantineAfter'),
    triggerModules: Object.freeze((Array.isArray(modules) ? modules : String(modules).split(',')).map((m: string) => m.trim()).filter((m: string) => m !== '')),
    signalRetentionMs: seconds(pick('signalRetention'), 'signalRetention'),
    push: flag(pick('push'), 'push'),
    sampleIntervalMs: nonNegativeSeconds(pick('sampleInterval'), 'sampleInterval'),
    traces: oneOf(pick('traces'), 'traces', TRACES_EXPORTERS),
    signalHttpToken: tokenOption(pick('signalHttpToken'), 'signalHttpToken', '; the endpoint is off without one'),
    logLevel: logLevel(pick('logLevel')),
    logFormat: logFormat(pick('logFormat')),
    timeoutSweepMs: Math.min(500, pollIntervalMs),
    cleanupIntervalMs: 60_000,
    cleanupGraceMs: 3_000,
    hostname: os.hostname(),
  };
  return Object.freeze(options);
}
