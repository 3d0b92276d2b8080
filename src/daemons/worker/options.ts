import type { Keyring } from '../../database/encryption/keyring.ts';
import { HTTP_OPTIONS } from '../../services/observability/options.ts';
import os from 'node:os';
import { flag, nonNegativeSeconds, oneOf, optionPicker, positiveInteger, seconds, type RawOptions } from '../../vocabulary/options/option-table.ts';
import { COMMON_OPTIONS, keyringOf, TRACES_EXPORTERS, type ResolvedCommonOptions } from '../common-options.ts';
import { logFormat, logLevel } from '../../vocabulary/logging.ts';
import type { WorkerOptions } from './worker.ts';
import type { SmartSensors } from '../../authoring/sensors/base-sensor.ts';
import { InvalidOptionError } from '../../vocabulary/errors.ts';
import { DEFAULT_QUEUE, type QueueSet } from '../../model/queues.ts';
import { queuesOption } from '../common-options.ts';

/** Where the status page is served by default (standalone's HTTP port on this machine). */
export const DEFAULT_PUBLIC_URL = 'http://127.0.0.1:8794';

/** Every worker option, keyed by its typed config field: environment variable, default and unit (see vocabulary/options/option-table.ts). */
export const WORKER_OPTIONS = {
  databaseUrl: COMMON_OPTIONS.databaseUrl,
  encryptionKeysFile: COMMON_OPTIONS.encryptionKeysFile,
  dagsFolder: {
    flag: 'dags',
    env: 'DEFERFLOW_DAGS_FOLDER',
    default: './dags',
    unit: 'path',
    describe: 'Folder of DAG files (.ts, .mts, .cts, .js, .mjs, .cjs), processed at start and every dag-process-interval',
  },
  concurrency: { env: 'DEFERFLOW_WORKER_CONCURRENCY', default: 16, unit: 'task instances', describe: 'Slots: most task instances run at once' },
  pollInterval: {
    env: 'DEFERFLOW_WORKER_POLL_INTERVAL',
    default: 1,
    unit: 'seconds',
    describe: 'Pause between claims when there is nothing to claim or no free slot',
  },
  heartbeatInterval: { env: 'DEFERFLOW_WORKER_HEARTBEAT_INTERVAL', default: 5, unit: 'seconds', describe: 'How often the worker records that it is alive' },
  shutdownGrace: {
    env: 'DEFERFLOW_WORKER_SHUTDOWN_GRACE',
    default: 30,
    unit: 'seconds',
    describe:
      'On SIGTERM, how long running tasks may finish before they are handed back (with their try: they run again, no retry spent); 0 hands them back at once',
  },
  dagProcessInterval: {
    env: 'DEFERFLOW_DAG_PROCESS_INTERVAL',
    default: 30,
    unit: 'seconds',
    describe: 'How often the DAG folder is processed into serialized DAGs',
  },
  smartSensors: {
    env: 'DEFERFLOW_SMART_SENSORS',
    default: '',
    unit: 'sensor classes (comma-separated) or all',
    describe: 'Sensor classes that wait consolidated on the triggerer whatever mode their DAG gave them (Smart Sensors); all: every sensor that can',
  },
  taskIsolation: {
    env: 'DEFERFLOW_TASK_ISOLATION',
    default: 'process',
    unit: 'process or none',
    describe:
      "Where task code runs: process, a pool of runner processes off the worker's event loop (execution timeouts kill, crashes fail one try); none, on the worker's own loop",
  },
  runnerMaxTasks: {
    env: 'DEFERFLOW_RUNNER_MAX_TASKS',
    default: 1000,
    unit: 'tasks',
    describe: 'Tasks a runner process runs before it is replaced, so leaks in task code do not pile up',
  },
  runnerMaxMemory: {
    env: 'DEFERFLOW_RUNNER_MAX_MEMORY',
    default: 1024,
    unit: 'MB',
    describe: "A runner process's heap limit (a task past it fails, DF_TASK_CRASHED) and the resident size past which it is replaced after a task",
  },
  publicUrl: {
    env: 'DEFERFLOW_PUBLIC_URL',
    default: DEFAULT_PUBLIC_URL,
    unit: 'URL',
    describe:
      "Where people reach the status page (deferflow web, or standalone's): the start of the signed links a task asking for human input sends (…/input/<token>)",
  },
  queues: {
    env: 'DEFERFLOW_WORKER_QUEUES',
    default: DEFAULT_QUEUE,
    unit: 'queue names (comma-separated)',
    describe: 'Queues whose task instances this worker runs; default is the queue of tasks that name none, and may be listed with others (default,gpu)',
  },
  ...HTTP_OPTIONS,
  sampleInterval: COMMON_OPTIONS.sampleInterval,
  traces: COMMON_OPTIONS.traces,
  push: COMMON_OPTIONS.push,
  logLevel: COMMON_OPTIONS.logLevel,
  logFormat: COMMON_OPTIONS.logFormat,
} as const;

/** The worker's options with every default applied, as resolveWorkerOptions returns them. */
export interface ResolvedWorkerOptions extends WorkerOptions, ResolvedCommonOptions {
  /** The queues whose task instances it claims. */
  readonly queues: QueueSet;
  /** How often it records its figures for the charts, in ms; 0: never. */
  readonly sampleIntervalMs: number;
  /** The folder of DAG files it processes. */
  readonly dagsFolder: string;
  /** How often it processes the DAG folder again, in ms. */
  readonly dagProcessIntervalMs: number;
  /** Sensor classes (classpath or class name) switched to the consolidated deferrable mode; 'all'; [] for none. */
  readonly smartSensors: SmartSensors;
  /** Where task code runs: 'process' (runner processes) or 'none' (the worker's own event loop). */
  readonly taskIsolation: TaskIsolation;
  /** Tasks a runner process runs before it is replaced. */
  readonly runnerMaxTasks: number;
  /** A runner process's heap limit and the resident size past which it is replaced, in MB. */
  readonly runnerMaxMemoryMb: number;
  /** Where people reach the status page: the start of human-input links. */
  readonly publicUrl: string;
}

/** raw → defaulted → validated and frozen. `keyring`: the process's, when it is loaded already (standalone, an embedded config), so the keys are read once; otherwise loaded here from DEFERFLOW_ENCRYPTION_KEYS and the keys file. */
export function resolveWorkerOptions(
  raw: RawOptions<typeof WORKER_OPTIONS> = {},
  env: NodeJS.ProcessEnv = process.env,
  keyring?: Keyring,
): ResolvedWorkerOptions {
  const pick = optionPicker(WORKER_OPTIONS, raw, env);
  return Object.freeze({
    databaseUrl: String(pick('databaseUrl')),
    keyring: keyring ?? keyringOf(pick('encryptionKeysFile'), env),
    dagsFolder: String(pick('dagsFolder')),
    concurrency: positiveInteger(pick('concurrency'), 'concurrency'),
    queues: queuesOption(pick('queues')),
    pollIntervalMs: seconds(pick('pollInterval'), 'pollInterval'),
    heartbeatIntervalMs: seconds(pick('heartbeatInterval'), 'heartbeatInterval'),
    shutdownGraceMs: nonNegativeSeconds(pick('shutdownGrace'), 'shutdownGrace'),
    dagProcessIntervalMs: seconds(pick('dagProcessInterval'), 'dagProcessInterval'),
    smartSensors: smartSensorsOf(pick('smartSensors')),
    taskIsolation: oneOf(pick('taskIsolation'), 'taskIsolation', TASK_ISOLATIONS),
    runnerMaxTasks: positiveInteger(pick('runnerMaxTasks'), 'runnerMaxTasks'),
    runnerMaxMemoryMb: runnerMemory(pick('runnerMaxMemory')),
    publicUrl: publicUrlOf(pick('publicUrl')),
    push: flag(pick('push'), 'push'),
    sampleIntervalMs: nonNegativeSeconds(pick('sampleInterval'), 'sampleInterval'),
    traces: oneOf(pick('traces'), 'traces', TRACES_EXPORTERS),
    logLevel: logLevel(pick('logLevel')),
    logFormat: logFormat(pick('logFormat')),
    hostname: os.hostname(),
  });
}

/** `all`, or sensor class names (a list, or comma-separated text), as `--smart-sensors` takes them. */
function smartSensorsOf(value: unknown): SmartSensors {
  const names = (Array.isArray(value) ? value.map(String) : String(value ?? '').split(',')).map((name) => name.trim()).filter((name) => name !== '');
  if (names.includes('all')) {
    if (names.length > 1)
      throw new InvalidOptionError('smartSensors', `"all" already covers every sensor class; give all, or class names, not both (got ${names.join(', ')})`);
    return 'all';
  }
  const bad = names.find((name) => !/^[A-Za-z_$][\w$.-]*$/.test(name));
  if (bad !== undefined)
    throw new InvalidOptionError('smartSensors', `${JSON.stringify(bad)} is not a sensor class name; give class names or classpaths, comma-separated, or all`);
  return Object.freeze(names);
}

export const TASK_ISOLATIONS = ['process', 'none'] as const;
export type TaskIsolation = (typeof TASK_ISOLATIONS)[number];

/** Below this a runner cannot load deferflow and a DAG file. */
const RUNNER_MIN_MEMORY_MB = 64;

function runnerMemory(value: unknown): number {
  const mb = positiveInteger(value, 'runnerMaxMemory');
  if (mb < RUNNER_MIN_MEMORY_MB)
    throw new InvalidOptionError(
      'runnerMaxMemory',
      `${mb} MB is too little for a runner process to load deferflow and a DAG file; give at least ${RUNNER_MIN_MEMORY_MB}`,
    );
  return mb;
}

function publicUrlOf(value: unknown): string {
  const text = String(value ?? '').trim();
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new InvalidOptionError(
      'publicUrl',
      `${JSON.stringify(text)} is not a URL; give where people reach the status page, e.g. https://deferflow.example.com`,
    );
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new InvalidOptionError('publicUrl', `${JSON.stringify(text)} is not an http(s) URL`);
  return text.replace(/\/+$/, '');
}
