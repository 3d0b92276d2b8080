import { Duration } from 'luxon';
import type { Logger } from 'pino';
import { COMMON_OPTIONS } from '../daemons/common-options.ts';
import { logFormat, logLevel, type LogFormat, type LogLevel } from '../vocabulary/logging.ts';
import type { OptionTable, RawOptions } from '../vocabulary/options/option-table.ts';
import { closestName } from '../vocabulary/suggest.ts';
import { InvalidOptionError } from '../vocabulary/errors.ts';
import { Keyring } from '../database/encryption/keyring.ts';
import type { DurationInput } from '../vocabulary/time/duration.ts';
import { resolveSchedulerOptions, SCHEDULER_OPTIONS, type ResolvedSchedulerOptions } from '../daemons/scheduler/options.ts';
import { isTriggerClass, type TriggerClass } from '../authoring/triggers/base-trigger.ts';
import { resolveTriggererOptions, TRIGGERER_OPTIONS, type TriggererOptions } from '../daemons/triggerer/options.ts';
import { resolveWorkerOptions, WORKER_OPTIONS, type ResolvedWorkerOptions } from '../daemons/worker/options.ts';
import { HTTP_OPTIONS, resolveObservabilityHttp, type ObservabilityHttpOptions } from '../services/observability/options.ts';
import type { TracingConfig } from '../services/observability/tracing.ts';

export type { DurationInput };

/**
 * The worker: runs task instances in slots and processes the DAG folder.
 * Every field is optional; the defaults are the CLI's (see the README's configuration table).
 */
export interface WorkerConfig {
  /** Slots: most task instances run at once. @default 16 */
  readonly concurrency?: number;
  /**
   * Queues whose task instances this worker runs (a list, or comma-separated). `default` is the
   * queue of tasks that name none; list it with others to run those too. @default 'default'
   */
  readonly queues?: string | readonly string[];
  /** Pause between claims when there is nothing to claim or no free slot. @default 1 second */
  readonly pollInterval?: DurationInput;
  /** How often the worker records that it is alive. @default 5 seconds */
  readonly heartbeatInterval?: DurationInput;
  /**
   * On stop, how long running tasks may finish before they are handed back (with their try:
   * they run again, no retry spent); 0 hands them back at once. @default 30 seconds
   */
  readonly shutdownGrace?: DurationInput;
  /** How often the DAG folder is processed into serialized DAGs. @default 30 seconds */
  readonly dagProcessInterval?: DurationInput;
  /**
   * Sensor classes (classpath or class name), or 'all', that wait consolidated on the triggerer
   * whatever mode their DAG gave them (Smart Sensors, switched on without changing DAGs). The
   * triggerer must allow those classes (triggerModules). @default []
   */
  readonly smartSensors?: 'all' | readonly string[];
  /**
   * Where task code runs: 'process', a pool of runner processes off the worker's event loop (an
   * execution timeout kills the task, a crash fails only its try); 'none', on the worker's own
   * event loop. @default 'process'
   */
  readonly taskIsolation?: 'process' | 'none';
  /** Tasks a runner process runs before it is replaced. @default 1000 */
  readonly runnerMaxTasks?: number;
  /** A runner process's heap limit, and the resident size past which it is replaced after a task, in MB. @default 1024 */
  readonly runnerMaxMemory?: number;
  /**
   * Where people reach the status page (`deferflow web`, or standalone's): the start of the
   * signed links a task asking for human input sends (`…/input/<token>`).
   * @default 'http://127.0.0.1:8794'
   */
  readonly publicUrl?: string;
  /**
   * Wake on work pushed by PostgreSQL (LISTEN/NOTIFY), or on other processes' commits to a
   * SQLite file, as well as every poll; false: poll only (behind a transaction-mode pooler).
   * @default true
   */
  readonly push?: boolean;
  /** How often it records its figures for the status page's charts; 0: never. @default 60 seconds */
  readonly sampleInterval?: DurationInput;
}

/** The scheduler: moves DAG runs through their tasks, from serialized DAGs. */
export interface SchedulerConfig {
  /** Pause between scheduling passes. @default 1 second */
  readonly pollInterval?: DurationInput;
  /** How often the scheduler records that it is alive. @default 5 seconds */
  readonly heartbeatInterval?: DurationInput;
  /**
   * A worker whose heartbeat is this old is dead (frozen, or cut off while its session lingers):
   * its task instances are retried or failed. A worker whose process is gone is known at once by
   * its liveness lock. @default 10 seconds
   */
  readonly zombieThreshold?: DurationInput;
  /** Most unfinished DAG runs looked at in one pass. @default 100 */
  readonly runsPerPass?: number;
  /**
   * Wake on work pushed by PostgreSQL (LISTEN/NOTIFY), or on other processes' commits to a
   * SQLite file, as well as every poll; false: poll only (behind a transaction-mode pooler).
   * @default true
   */
  readonly push?: boolean;
  /** How often it records its figures for the status page's charts; 0: never. @default 60 seconds */
  readonly sampleInterval?: DurationInput;
}

/** The triggerer: runs deferred task instances' triggers until they fire. */
export interface TriggererConfig {
  /** Most triggers this triggerer runs at once; it claims no more. @default 1000 */
  readonly capacity?: number;
  /**
   * Queues whose triggers this triggerer runs (a list, or comma-separated): a trigger is in the
   * queue of the task that deferred on it. `default` is the queue of tasks that name none, and
   * may be listed with others. @default 'default'
   */
  readonly queues?: string | readonly string[];
  /** How often the triggerer records that it is alive. @default 5 seconds */
  readonly heartbeatInterval?: DurationInput;
  /**
   * A triggerer whose heartbeat is this old is dead (frozen, or cut off while its session
   * lingers); peers take its triggers. Longer than heartbeatInterval. A triggerer whose process is
   * gone is known at once by its liveness lock. @default 10 seconds
   */
  readonly healthCheckThreshold?: DurationInput;
  /** Most unowned triggers claimed in one pass. @default 1000 */
  readonly claimsPerLoop?: number;
  /** Pause between passes (claim, hand over, clean up) when there is nothing more to claim. @default 1 second */
  readonly pollInterval?: DurationInput;
  /** A trigger step holding the event loop longer than this is logged as a warning naming it. @default 0.2 seconds */
  readonly blockThreshold?: DurationInput;
  /** Signals older than this are pruned (each key's latest kept). @default 7 days */
  readonly signalRetention?: DurationInput;
  /**
   * A watchdog thread restarts the process (SIGKILL, for its supervisor to start again) once the
   * event loop has been held this long, recording the trigger whose step held it; 0: no
   * watchdog. @default 10 seconds
   */
  readonly watchdogLimit?: DurationInput;
  /** A trigger recorded this many times by watchdogs is quarantined: its task instances fail (DF_TRIGGER_QUARANTINED). @default 2 */
  readonly quarantineAfter?: number;
  /**
   * Serve POST /signals/:key on the process's HTTP endpoint (the `http` section, which it then
   * needs), refusing requests without this bearer token (16+ characters). @default none: not served
   */
  readonly signalHttpToken?: string;
  /**
   * Modules (paths, or package names resolved from the working directory) whose exported
   * BaseTrigger classes this triggerer may run. The built-in triggers are always allowed.
   * @default []
   */
  readonly triggerModules?: readonly string[];
  /** Trigger classes this triggerer may run, given directly (no module to load). @default [] */
  readonly triggerClasses?: readonly TriggerClass[];
  /**
   * Wake on work pushed by PostgreSQL (LISTEN/NOTIFY), or on other processes' commits to a
   * SQLite file, as well as every poll; false: poll only (behind a transaction-mode pooler).
   * @default true
   */
  readonly push?: boolean;
  /** How often it records its figures for the status page's charts; 0: never. @default 60 seconds */
  readonly sampleInterval?: DurationInput;
}

/**
 * deferflow embedded in a Node process: which of the worker, the scheduler and the triggerer
 * run here, on which database. Each runs unless set to `false`. Only what is given here counts:
 * unlike the CLI, the embedded API reads no environment variable.
 */
export interface DeferflowConfig {
  /** `sqlite:PATH` or `postgres://USER@HOST:PORT/DB`. @default 'sqlite:./deferflow.db' */
  readonly databaseUrl?: string;
  /** The folder of DAG files the worker loads and processes. @default './dags' */
  readonly dagsFolder?: string;
  /** The worker's options, or false to run none here. @default {} */
  readonly worker?: WorkerConfig | false;
  /** The scheduler's options, or false to run none here. @default {} */
  readonly scheduler?: SchedulerConfig | false;
  /** The triggerer's options, or false to run none here. @default {} */
  readonly triggerer?: TriggererConfig | false;
  /** Apply pending migrations on start; with false, a database that is not migrated is refused (DF_DATABASE_NOT_MIGRATED). @default true */
  readonly migrate?: boolean;
  /** A pino logger of your own; the components log through children of it. @default JSON lines on stdout at logLevel */
  readonly logger?: Logger;
  /** Least severe level logged, when no logger is given. @default 'info' */
  readonly logLevel?: LogLevel;
  /** `json` (one object a line) or `pretty`, when no logger is given. @default 'json' */
  readonly logFormat?: LogFormat;
  /**
   * Serve /metrics (Prometheus) and /health from this process; false: not served.
   * @default false
   */
  readonly http?: HttpConfig | false;
  /**
   * Encrypt trigger kwargs, next_kwargs and event payloads at rest (AES-256-GCM) with these keys,
   * each `ID:BASE64` (32 bytes; `deferflow db generate-key`). The first encrypts; the others
   * still decrypt what they encrypted, until `deferflow db rotate-key` has re-encrypted it. Every
   * process on the database needs the same keys. @default [] (values are stored in plain)
   */
  readonly encryptionKeys?: readonly string[];
  /** A file of such keys, one a line (`#` comments), added after encryptionKeys. @default none */
  readonly encryptionKeysFile?: string;
  /**
   * OpenTelemetry traces: a task instance's tries, deferrals and trigger runs as one trace,
   * exported by `exporter` (see TracingConfig; the OpenTelemetry packages are optional peers).
   * @default false (no traces, and nothing of them made)
   */
  readonly tracing?: TracingConfig | false;
}

/** The process's /metrics and /health endpoint. */
export interface HttpConfig {
  /** Where it listens. @default '127.0.0.1' */
  readonly host?: string;
  /** 0: any free one (see Deferflow.httpAddress). @default 0 */
  readonly port?: number;
  /** /health fails once the event loop has been blocked this long. @default 10 seconds */
  readonly healthLoopThreshold?: DurationInput;
}

/** A DeferflowConfig with its defaults applied, validated and frozen. */
export interface DeferflowOptions {
  /** The database URL the components use. */
  readonly databaseUrl: string;
  /** The DAG folder the worker processes. */
  readonly dagsFolder: string;
  /** The worker's options, resolved; null: no worker in this process. */
  readonly worker: ResolvedWorkerOptions | null;
  /** The scheduler's options, resolved; null: no scheduler in this process. */
  readonly scheduler: ResolvedSchedulerOptions | null;
  /** The triggerer's options, resolved; null: no triggerer in this process. */
  readonly triggerer: TriggererOptions | null;
  /** Trigger classes given directly, allowed on the triggerer besides its modules. */
  readonly triggerClasses: readonly TriggerClass[];
  /** Whether the database is migrated at start (false: an unmigrated one is refused). */
  readonly migrate: boolean;
  /** The log level of the default logger. */
  readonly logLevel: LogLevel;
  /** The log format of the default logger. */
  readonly logFormat: LogFormat;
  /** /metrics and /health; null: not served. */
  readonly http: ObservabilityHttpOptions | null;
  /** Encryption at rest (Keyring.none: values stored in plain). */
  readonly keyring: Keyring;
  /** Where traces go; null: tracing is off. */
  readonly tracing: TracingConfig | null;
}

const TOP_LEVEL_KEYS = [
  'databaseUrl',
  'dagsFolder',
  'worker',
  'scheduler',
  'triggerer',
  'migrate',
  'logger',
  'logLevel',
  'logFormat',
  'http',
  'encryptionKeys',
  'encryptionKeysFile',
  'tracing',
] as const;

/** raw → defaulted → validated and frozen. A bad field throws DF_INVALID_OPTION naming it (`worker.concurrency: …`). */
export function resolveDeferflowConfig(config: DeferflowConfig = {}): DeferflowOptions {
  if (!isPlainObject(config)) throw new InvalidOptionError('config', `expected an object of options, got ${describe(config)}`);
  refuseUnknownKeys(config, TOP_LEVEL_KEYS, '');
  const shared = {
    databaseUrl: config.databaseUrl ?? COMMON_OPTIONS.databaseUrl.default,
    logLevel: logLevel(config.logLevel ?? COMMON_OPTIONS.logLevel.default),
    logFormat: logFormat(config.logFormat ?? COMMON_OPTIONS.logFormat.default),
  };
  if (typeof shared.databaseUrl !== 'string') throw new InvalidOptionError('databaseUrl', `expected a URL string, got ${describe(config.databaseUrl)}`);
  const dagsFolder = config.dagsFolder ?? WORKER_OPTIONS.dagsFolder.default;
  if (typeof dagsFolder !== 'string' || dagsFolder === '')
    throw new InvalidOptionError('dagsFolder', `expected a folder path, got ${describe(config.dagsFolder)}`);
  const migrate = config.migrate ?? true;
  if (typeof migrate !== 'boolean') throw new InvalidOptionError('migrate', `expected true or false, got ${describe(config.migrate)}`);
  if (config.logger !== undefined && (config.logger === null || typeof config.logger.child !== 'function')) {
    throw new InvalidOptionError('logger', `expected a pino logger, got ${describe(config.logger)}`);
  }

  const keyring = keyringOfConfig(config.encryptionKeys, config.encryptionKeysFile);

  const worker = section(config.worker, 'worker', WORKER_OPTIONS, [], (raw) => resolveWorkerOptions({ ...shared, dagsFolder, ...raw }, {}, keyring));
  const scheduler = section(config.scheduler, 'scheduler', SCHEDULER_OPTIONS, [], (raw) => resolveSchedulerOptions({ ...shared, ...raw }, {}, keyring));
  const triggerClasses = config.triggerer === false ? [] : triggerClassesOf(config.triggerer?.triggerClasses);
  const triggerer = section(config.triggerer, 'triggerer', TRIGGERER_OPTIONS, ['triggerClasses'], (raw) =>
    resolveTriggererOptions({ ...shared, ...raw }, {}, keyring),
  );
  const http = httpOf(config.http);
  if (triggerer?.signalHttpToken && http === null)
    throw new InvalidOptionError(
      'triggerer.signalHttpToken',
      "POST /signals/:key is served on the process's HTTP endpoint: give http: { port } too (0: any free one)",
    );
  return Object.freeze({
    databaseUrl: shared.databaseUrl,
    dagsFolder,
    worker,
    scheduler,
    triggerer,
    triggerClasses: Object.freeze(triggerClasses),
    migrate,
    logLevel: shared.logLevel,
    logFormat: shared.logFormat,
    http,
    keyring,
    tracing: tracingOf(config.tracing),
  });
}

/** The embedded `tracing` section: false or absent → null (off). */
function tracingOf(given: TracingConfig | false | undefined): TracingConfig | null {
  if (given === undefined || given === false) return null;
  if (!isPlainObject(given)) throw new InvalidOptionError('tracing', `expected { exporter, serviceName? } or false, got ${describe(given)}`);
  refuseUnknownKeys(given, ['exporter', 'serviceName'], 'tracing.');
  const { exporter, serviceName } = given;
  const isExporter = typeof exporter === 'object' && exporter !== null && typeof (exporter as { export?: unknown }).export === 'function';
  if (exporter !== 'otlp' && exporter !== 'console' && !isExporter)
    throw new InvalidOptionError('tracing.exporter', `expected 'otlp', 'console' or an OpenTelemetry SpanExporter, got ${describe(exporter)}`);
  if (serviceName !== undefined && (typeof serviceName !== 'string' || serviceName === ''))
    throw new InvalidOptionError('tracing.serviceName', `expected a name, got ${describe(serviceName)}`);
  return Object.freeze({ ...given });
}

/** The embedded encryption keys: the list given, then the file's. */
function keyringOfConfig(keys: unknown, keysFile: unknown): Keyring {
  if (keys !== undefined && !(Array.isArray(keys) && keys.every((key) => typeof key === 'string'))) {
    throw new InvalidOptionError('encryptionKeys', `expected an array of 'ID:BASE64' strings, got ${describe(keys)}`);
  }
  if (keysFile !== undefined && (typeof keysFile !== 'string' || keysFile === '')) {
    throw new InvalidOptionError('encryptionKeysFile', `expected a file path, got ${describe(keysFile)}`);
  }
  return Keyring.load(keys ?? [], keysFile, 'encryptionKeysFile', 'encryptionKeys');
}

/** The embedded `http` section: false or absent → null; else port 0 (any free one) unless given. */
function httpOf(given: HttpConfig | false | undefined): ObservabilityHttpOptions | null {
  if (given === undefined || given === false) return null;
  if (!isPlainObject(given)) throw new InvalidOptionError('http', `expected { host?, port?, healthLoopThreshold? } or false, got ${describe(given)}`);
  refuseUnknownKeys(given, Object.keys(HTTP_OPTIONS), 'http.');
  const raw: Record<string, unknown> = {};
  for (const [field, spec] of Object.entries(HTTP_OPTIONS)) {
    const value = (given as Record<string, unknown>)[field];
    if (value !== undefined) raw[field] = toTableUnit(value, spec.unit, `http.${field}`);
  }
  try {
    return resolveObservabilityHttp(raw as RawOptions<typeof HTTP_OPTIONS>, {}, 0);
  } catch (error) {
    if (error instanceof InvalidOptionError && error.option in HTTP_OPTIONS) throw error.renamed(`http.${error.option}`);
    throw error;
  }
}

/**
 * The options of a process running the components given, each already resolved (the CLI's
 * worker, scheduler, triggerer and standalone commands); database and logging come from them.
 */
export function deferflowOptionsOf(
  components: { readonly worker?: ResolvedWorkerOptions; readonly scheduler?: ResolvedSchedulerOptions; readonly triggerer?: TriggererOptions },
  migrate: boolean,
  http: ObservabilityHttpOptions | null = null,
): DeferflowOptions {
  const any = components.worker ?? components.scheduler ?? components.triggerer;
  if (!any) throw new InvalidOptionError('components', 'name at least one of worker, scheduler, triggerer');
  return Object.freeze({
    databaseUrl: any.databaseUrl,
    dagsFolder: components.worker?.dagsFolder ?? WORKER_OPTIONS.dagsFolder.default,
    worker: components.worker ?? null,
    scheduler: components.scheduler ?? null,
    triggerer: components.triggerer ?? null,
    triggerClasses: Object.freeze([]),
    migrate,
    logLevel: any.logLevel,
    logFormat: any.logFormat,
    http,
    keyring: any.keyring,
    tracing: any.traces === 'off' ? null : { exporter: any.traces },
  });
}

/** Options each section takes itself from the top level, not per component. */
const TAKEN_FROM_TOP_FIELDS = [
  'databaseUrl',
  'dagsFolder',
  'logLevel',
  'logFormat',
  'encryptionKeysFile',
  'host',
  'port',
  'healthLoopThreshold',
  'traces',
] as const;
const TAKEN_FROM_TOP: ReadonlySet<string> = new Set(TAKEN_FROM_TOP_FIELDS);

/**
 * One component's section: false → null; an object → its raw options (camelCase keys mapped to
 * the table's flags, durations to the table's unit), resolved by the component's own resolver.
 */
function section<Table extends OptionTable, Resolved>(
  given: object | false | undefined,
  name: string,
  table: Table,
  extraKeys: readonly string[],
  resolve: (raw: RawOptions<Table>) => Resolved,
): Resolved | null {
  if (given === false) return null;
  const values = given ?? {};
  if (!isPlainObject(values)) throw new InvalidOptionError(name, `expected an object of options or false (to run no ${name} here), got ${describe(given)}`);
  const fields = Object.keys(table).filter((field) => !TAKEN_FROM_TOP.has(field));
  refuseUnknownKeys(values, [...fields, ...extraKeys], `${name}.`);
  const raw: Record<string, unknown> = {};
  for (const field of fields) {
    const value = (values as Record<string, unknown>)[field];
    if (value !== undefined) raw[field] = toTableUnit(value, table[field]!.unit, `${name}.${field}`);
  }
  try {
    return resolve(raw as RawOptions<Table>);
  } catch (error) {
    // The resolvers name the field; here it sits in its section.
    if (error instanceof InvalidOptionError && fields.includes(error.option)) throw error.renamed(`${name}.${error.option}`);
    throw error;
  }
}

/** A Duration or a number of seconds, in what the table's option counts (seconds or milliseconds); other values as given. */
function toTableUnit(value: unknown, unit: string, field: string): unknown {
  const isDurationOption = unit === 'seconds' || unit === 'milliseconds';
  if (Duration.isDuration(value)) {
    if (!isDurationOption) throw new InvalidOptionError(field, `counts ${unit}, not a length of time; give a number`);
    if (!value.isValid) throw new InvalidOptionError(field, `is an invalid Duration (${value.invalidExplanation ?? value.invalidReason})`);
    return unit === 'seconds' ? value.as('seconds') : value.toMillis();
  }
  if (unit === 'milliseconds' && typeof value === 'number') return value * 1000;
  if (isDurationOption && typeof value !== 'number')
    throw new InvalidOptionError(field, `expected a luxon Duration or a number of seconds, got ${describe(value)}`);
  return value;
}

function triggerClassesOf(given: unknown): TriggerClass[] {
  if (given === undefined) return [];
  if (!Array.isArray(given)) throw new InvalidOptionError('triggerer.triggerClasses', `expected an array of BaseTrigger classes, got ${describe(given)}`);
  return given.map((candidate, index) => {
    if (!isTriggerClass(candidate)) {
      throw new InvalidOptionError(`triggerer.triggerClasses[${index}]`, `expected a BaseTrigger subclass with a static classpath, got ${describe(candidate)}`);
    }
    return candidate;
  });
}

function refuseUnknownKeys(values: object, known: readonly string[], prefix: string): void {
  for (const key of Object.keys(values)) {
    if (known.includes(key)) continue;
    const meant = closestName(key, known);
    throw new InvalidOptionError(`${prefix}${key}`, `is not an option${meant ? ` (did you mean ${meant}?)` : ''}; the options here are ${known.join(', ')}`);
  }
}

function isPlainObject(value: unknown): value is object {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
  const prototype = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}

function describe(value: unknown): string {
  if (value === null || value === undefined) return String(value);
  if (typeof value === 'function') return `a function${value.name ? ` (${value.name})` : ''}`;
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'object') return `an object (${value.constructor?.name ?? 'no prototype'})`;
  return `${typeof value} ${JSON.stringify(value)}`;
}

// The option tables are keyed by the fields of the config interfaces above: a field added to one
// and not the other fails the build. (A section's table also holds what it takes from the top
// level of DeferflowConfig or from its http section.)
type SectionKeys<Table> = Exclude<keyof Table, (typeof TAKEN_FROM_TOP_FIELDS)[number]>;
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;
const inSync: [
  Same<keyof WorkerConfig, SectionKeys<typeof WORKER_OPTIONS>>,
  Same<keyof SchedulerConfig, SectionKeys<typeof SCHEDULER_OPTIONS>>,
  Same<Exclude<keyof TriggererConfig, 'triggerClasses'>, SectionKeys<typeof TRIGGERER_OPTIONS>>,
  Same<keyof HttpConfig, keyof typeof HTTP_OPTIONS>,
] = [true, true, true, true];
void inSync;
