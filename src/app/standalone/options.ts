import { flag, optionPicker, type RawOptions } from '../../vocabulary/options/option-table.ts';
import { resolveSchedulerOptions, type ResolvedSchedulerOptions } from '../../daemons/scheduler/options.ts';
import { COMMON_OPTIONS } from '../../daemons/common-options.ts';
import { logFormat as toLogFormat, logLevel as toLogLevel, type LogFormat, type LogLevel } from '../../vocabulary/logging.ts';
import { resolveTriggererOptions, TRIGGERER_OPTIONS, type TriggererOptions } from '../../daemons/triggerer/options.ts';
import { resolveWorkerOptions, WORKER_OPTIONS, type ResolvedWorkerOptions } from '../../daemons/worker/options.ts';
import { HTTP_OPTIONS, resolveObservabilityHttp, type ObservabilityHttpOptions } from '../../services/observability/options.ts';
import { resolveWebOptions, WEB_OPTIONS, type WebOptions } from '../web/options.ts';

/** Where standalone serves /metrics and /health unless told otherwise. */
export const STANDALONE_HTTP_PORT = 8794;

/**
 * `deferflow standalone` options: the few a one-process setup needs. Everything else (poll and
 * heartbeat intervals, grace periods) is each component's own option, read from its
 * environment variable as the separate commands do (see their tables).
 */
export const STANDALONE_OPTIONS = {
  databaseUrl: COMMON_OPTIONS.databaseUrl,
  encryptionKeysFile: COMMON_OPTIONS.encryptionKeysFile,
  dagsFolder: WORKER_OPTIONS.dagsFolder,
  concurrency: WORKER_OPTIONS.concurrency,
  capacity: TRIGGERER_OPTIONS.capacity,
  triggerModules: TRIGGERER_OPTIONS.triggerModules,
  smartSensors: WORKER_OPTIONS.smartSensors,
  sampleInterval: COMMON_OPTIONS.sampleInterval,
  traces: COMMON_OPTIONS.traces,
  triggerDag: {
    env: 'DEFERFLOW_STANDALONE_TRIGGER_DAG',
    default: '',
    unit: 'DAG id',
    describe: 'Once started, create a manual run of this DAG and show its progress',
  },
  exitWhenDone: {
    env: 'DEFERFLOW_STANDALONE_EXIT_WHEN_DONE',
    default: false,
    unit: 'flag',
    describe: 'With trigger-dag: stop once that run finishes; exit 0 if it succeeded, 1 if it failed',
  },
  shutdownGrace: {
    env: 'DEFERFLOW_STANDALONE_SHUTDOWN_GRACE',
    default: 0,
    unit: 'seconds',
    describe: 'On Ctrl-C or SIGTERM, how long running tasks may finish before they are handed back (with their try: they run again on the next start)',
  },
  port: {
    ...HTTP_OPTIONS.port,
    default: STANDALONE_HTTP_PORT,
    describe:
      'Serve the status page, /metrics (Prometheus) and /health on this port; off: not served (the default port, when taken, is skipped with a warning)',
  },
  ...WEB_OPTIONS,
  host: HTTP_OPTIONS.host,
  healthLoopThreshold: HTTP_OPTIONS.healthLoopThreshold,
  logLevel: {
    ...COMMON_OPTIONS.logLevel,
    default: 'warn',
    describe: 'Least severe log level printed (to stderr; standalone keeps stdout for progress)',
  },
  logFormat: COMMON_OPTIONS.logFormat,
} as const;

export interface StandaloneOptions {
  readonly worker: ResolvedWorkerOptions;
  readonly scheduler: ResolvedSchedulerOptions;
  readonly triggerer: TriggererOptions;
  /** A DAG to run once started; null for none. */
  readonly triggerDag: string | null;
  readonly exitWhenDone: boolean;
  /** The status page, /metrics and /health; null: not served. */
  readonly http: ObservabilityHttpOptions | null;
  /** The status page's options; null when nothing is served. */
  readonly web: WebOptions | null;
  readonly logLevel: LogLevel;
  readonly logFormat: LogFormat;
}

export function resolveStandaloneOptions(raw: RawOptions<typeof STANDALONE_OPTIONS> = {}, env: NodeJS.ProcessEnv = process.env): StandaloneOptions {
  const pick = optionPicker(STANDALONE_OPTIONS, raw, env);
  const logLevel = toLogLevel(pick('logLevel'));
  const logFormat = toLogFormat(pick('logFormat'));
  const shared = {
    databaseUrl: pick('databaseUrl') as string,
    encryptionKeysFile: pick('encryptionKeysFile') as string,
    logLevel: logLevel,
    logFormat: logFormat,
    sampleInterval: pick('sampleInterval') as number,
    traces: pick('traces') as string,
  };
  const triggerDag = String(pick('triggerDag')).trim();
  const http = resolveObservabilityHttp(raw, env, STANDALONE_HTTP_PORT);
  // The keyring is loaded once, with the worker's options, and shared: one process, one database.
  const worker = resolveWorkerOptions(
    {
      ...shared,
      dagsFolder: pick('dagsFolder') as string,
      concurrency: pick('concurrency') as number,
      shutdownGrace: pick('shutdownGrace') as number,
      smartSensors: pick('smartSensors') as string,
      // Human-input links lead to this process's own status page, unless DEFERFLOW_PUBLIC_URL says otherwise.
      ...(http !== null && http.port !== 0 && !env.DEFERFLOW_PUBLIC_URL ? { publicUrl: `http://${reachableHost(http.host)}:${http.port}` } : {}),
    },
    env,
  );
  return Object.freeze({
    worker,
    scheduler: resolveSchedulerOptions(shared, env, worker.keyring),
    triggerer: resolveTriggererOptions(
      { ...shared, capacity: pick('capacity') as number, triggerModules: pick('triggerModules') as string[] },
      env,
      worker.keyring,
    ),
    triggerDag: triggerDag === '' ? null : triggerDag,
    exitWhenDone: flag(pick('exitWhenDone'), 'exitWhenDone'),
    http,
    web: http === null ? null : resolveWebOptions(raw, env, http.host),
    logLevel,
    logFormat,
  });
}

/** An address to put in a link: a wildcard listen address is reached on this machine as loopback. */
function reachableHost(host: string): string {
  if (host === '0.0.0.0' || host === '::' || host === '[::]') return '127.0.0.1';
  return host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
}
