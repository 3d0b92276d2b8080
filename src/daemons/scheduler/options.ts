import type { Keyring } from '../../database/encryption/keyring.ts';
import { HTTP_OPTIONS } from '../../services/observability/options.ts';
import os from 'node:os';
import { InvalidOptionError } from '../../vocabulary/errors.ts';
import { flag, nonNegativeSeconds, oneOf, optionPicker, positiveInteger, seconds, type RawOptions } from '../../vocabulary/options/option-table.ts';
import { COMMON_OPTIONS, keyringOf, TRACES_EXPORTERS, type ResolvedCommonOptions } from '../common-options.ts';
import { logFormat, logLevel } from '../../vocabulary/logging.ts';
import type { SchedulerOptions } from './scheduler.ts';
import { ZOMBIE_THRESHOLD_OPTION } from '../liveness-options.ts';

/** Every scheduler option, keyed by its typed config field: environment variable, default and unit (see vocabulary/options/option-table.ts). */
export const SCHEDULER_OPTIONS = {
  databaseUrl: COMMON_OPTIONS.databaseUrl,
  encryptionKeysFile: COMMON_OPTIONS.encryptionKeysFile,
  pollInterval: { env: 'DEFERFLOW_SCHEDULER_POLL_INTERVAL', default: 1, unit: 'seconds', describe: 'Pause between scheduling passes' },
  heartbeatInterval: {
    env: 'DEFERFLOW_SCHEDULER_HEARTBEAT_INTERVAL',
    default: 5,
    unit: 'seconds',
    describe: 'How often the scheduler records that it is alive',
  },
  zombieThreshold: ZOMBIE_THRESHOLD_OPTION,
  runsPerPass: { env: 'DEFERFLOW_SCHEDULER_RUNS_PER_PASS', default: 100, unit: 'DAG runs', describe: 'Most unfinished DAG runs looked at in one pass' },
  ...HTTP_OPTIONS,
  sampleInterval: COMMON_OPTIONS.sampleInterval,
  traces: COMMON_OPTIONS.traces,
  push: COMMON_OPTIONS.push,
  logLevel: COMMON_OPTIONS.logLevel,
  logFormat: COMMON_OPTIONS.logFormat,
} as const;

/** The scheduler's options with every default applied, as resolveSchedulerOptions returns them. */
export interface ResolvedSchedulerOptions extends SchedulerOptions, ResolvedCommonOptions {
  /** How often it records its figures for the charts, in ms; 0: never. */
  readonly sampleIntervalMs: number;
}

/** raw → defaulted → validated and frozen. `keyring`: the process's, when it is loaded already (standalone, an embedded config), so the keys are read once; otherwise loaded here from DEFERFLOW_ENCRYPTION_KEYS and the keys file. */
export function resolveSchedulerOptions(
  raw: RawOptions<typeof SCHEDULER_OPTIONS> = {},
  env: NodeJS.ProcessEnv = process.env,
  keyring?: Keyring,
): ResolvedSchedulerOptions {
  const pick = optionPicker(SCHEDULER_OPTIONS, raw, env);
  const heartbeatIntervalMs = seconds(pick('heartbeatInterval'), 'heartbeatInterval');
  const zombieThresholdMs = seconds(pick('zombieThreshold'), 'zombieThreshold');
  if (zombieThresholdMs <= heartbeatIntervalMs) {
    throw new InvalidOptionError('zombieThreshold', `must be longer than a worker's heartbeat interval (${heartbeatIntervalMs / 1000} s)`);
  }
  return Object.freeze({
    databaseUrl: String(pick('databaseUrl')),
    keyring: keyring ?? keyringOf(pick('encryptionKeysFile'), env),
    pollIntervalMs: seconds(pick('pollInterval'), 'pollInterval'),
    heartbeatIntervalMs,
    zombieThresholdMs,
    runsPerPass: positiveInteger(pick('runsPerPass'), 'runsPerPass'),
    push: flag(pick('push'), 'push'),
    sampleIntervalMs: nonNegativeSeconds(pick('sampleInterval'), 'sampleInterval'),
    traces: oneOf(pick('traces'), 'traces', TRACES_EXPORTERS),
    logLevel: logLevel(pick('logLevel')),
    logFormat: logFormat(pick('logFormat')),
    hostname: os.hostname(),
  });
}
