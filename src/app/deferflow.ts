import type { Logger } from 'pino';
import { BUILTIN_TRIGGERS } from '../../triggers/index.ts';
import { assertDagFolder, keepDagFolderProcessed, serializedDagSource } from '../services/dags/dag-processor.ts';
import { triggerDagRun, type ManualRunOptions } from '../services/dags/manual-run.ts';
import { openDatabase, type Database } from '../database/connect.ts';
import { migrateToLatest } from '../database/migrate.ts';
import { openMigratedDatabase, unreachable } from '../database/open-migrated-database.ts';
import { describeThrown, InvalidOptionError, LifecycleError, NotAwaitingInputError } from '../vocabulary/errors.ts';
import { createLogger } from '../vocabulary/logging.ts';
import type { DagRunState } from '../database/schema.ts';
import { Scheduler } from '../daemons/scheduler/scheduler.ts';
import { openStores } from '../storage/index.ts';
import { InputService, type GivenAnswer } from '../services/human-input/input-service.ts';
import type { InputResponse } from '../model/human-input.ts';
import { SignalService, type SignalListener, type SignalSubscription } from '../services/signals/signal-service.ts';
import { signalRoute, type SentSignal } from '../services/signals/signal-http.ts';
import { signalAudience } from '../services/signals/signal-audience.ts';
import type { Signal } from '../model/signal.ts';
import type { JsonValue } from '../vocabulary/serialization/json.ts';
import { TriggerRegistry } from '../authoring/triggers/registry.ts';
import { Triggerer } from '../daemons/triggerer/triggerer.ts';
import { dagFileResolver, taskServices } from '../daemons/worker/dag-file-resolver.ts';
import { ProcessTaskRunner } from '../daemons/worker/process-task-runner.ts';
import type { TaskResolver } from '../daemons/worker/worker.ts';
import type { TaskRunner } from '../daemons/worker/task-runner.ts';
import type { ResolvedWorkerOptions } from '../daemons/worker/options.ts';
import { Worker } from '../daemons/worker/worker.ts';
import { resolveDeferflowConfig, type DeferflowConfig, type DeferflowOptions } from './config.ts';
import { Metrics } from '../services/observability/metrics.ts';
import { ObservabilityServer, type ExtraRoutes } from '../services/observability/http-server.ts';
import type { AddressInfo } from 'node:net';
import { WakeSet } from '../vocabulary/time/wake-set.ts';
import { Tracing } from '../services/observability/tracing.ts';

/** How often waitForDagRun looks at the run. */
const RUN_POLL_MS = 200;

/**
 * Starts deferflow in this process, as configured (by default a worker, a scheduler and a
 * triggerer on `sqlite:./deferflow.db`, DAGs from ./dags), and resolves once it runs. Stop it with
 * `await app.stop()`.
 *
 * ```ts
 * const app = await deferflow({ databaseUrl: 'postgres://…', dagsFolder: './dags', triggerer: { capacity: 5000 } });
 * const runId = await app.triggerDagRun('nightly_report', { conf: { day: '2026-11-23' } });
 * console.log(await app.waitForDagRun('nightly_report', runId)); // 'success' | 'failed'
 * await app.stop();
 * ```
 */
export async function deferflow(config: DeferflowConfig = {}): Promise<Deferflow> {
  const app = await Deferflow.open(resolveDeferflowConfig(config), config.logger);
  try {
    await app.start();
  } catch (error) {
    await app.stop();
    throw error;
  }
  return app;
}

/**
 * Whichever of the worker, the scheduler and the triggerer the options ask for, on one database,
 * in this process. Each is the component the CLI's commands run, with its own job row; together
 * they also wake each other when one makes work for another (a deferral for the triggerer, an
 * event for the worker, a finished task for the scheduler) instead of waiting for their next
 * poll. `deferflow standalone` is this with all three.
 *
 *   new ──start()──▶ running ──stop()──▶ stopped      (stop() runs once; later calls wait for it)
 */
export class Deferflow {
  /** The worker running in this process; null if not asked for. */
  readonly worker: Worker | null;
  /** The scheduler running in this process; null if not asked for. */
  readonly scheduler: Scheduler | null;
  /** The triggerer running in this process; null if not asked for. */
  readonly triggerer: Triggerer | null;
  /** This process's metrics (served at /metrics when options.http is set). */
  readonly metrics = new Metrics();
  #http: ObservabilityServer | null = null;
  /** Pages served next to /metrics and /health (the status page); set before start(). */
  extraRoutes: ExtraRoutes | undefined;
  #state: 'new' | 'running' | 'stopped' = 'new';
  #dagProcessing: { stop(): void } | null = null;
  #stopped: Promise<void> | null = null;
  /** Wakes every waitForDagRun now (a scheduler pass changed runs, or a stop). */
  readonly #runWatchers = new WakeSet();
  readonly #dagProcessingLog: Logger;
  readonly #httpLog: Logger;
  readonly #log: Logger;
  /** The process's tracing (see tracing.ts); null when off. */
  readonly #tracing: Tracing | null;

  /**
   * Opens the database (migrating it, unless `options.migrate` is false: then it must be
   * migrated already), loads the allowed trigger classes and builds the components; start() runs them.
   */
  static async open(options: DeferflowOptions, logger?: Logger): Promise<Deferflow> {
    if (options.worker) await assertDagFolder(options.dagsFolder);
    const log = logger ?? createLogger({ level: options.logLevel, format: options.logFormat });
    // Before the database: a package tracing needs and lacks is refused first (DF_MISSING_PACKAGE).
    const tracing = Tracing.open(options.tracing);
    const registry = new TriggerRegistry(BUILTIN_TRIGGERS);
    for (const cls of options.triggerClasses) registry.register(cls, 'triggerer.triggerClasses');
    for (const module of options.triggerer?.triggerModules ?? []) {
      const classpaths = await registry.loadModule(module);
      log.info({ module, classpaths }, `allowed triggers from ${module}: ${classpaths.join(', ')}`);
    }
    let database: Database;
    let applied: readonly string[] = [];
    if (options.migrate) {
      database = openDatabase(options.databaseUrl, { keyring: options.keyring });
      try {
        applied = await migrateToLatest(database);
      } catch (error) {
        await database.close().catch(() => {});
        throw unreachable(options.databaseUrl, error);
      }
    } else {
      database = await openMigratedDatabase(options.databaseUrl, options.keyring);
    }
    if (options.keyring.encrypting) {
      // Before any component writes: a key the database knows under other material is refused here.
      try {
        await openStores(database).maintenance.verifyEncryptionKeys(Date.now());
      } catch (error) {
        await database.close().catch(() => {});
        throw unreachable(options.databaseUrl, error);
      }
    }
    return new Deferflow(database, options, registry, log, applied, tracing);
  }

  private constructor(
    /** The open database every component uses; open until stop() ends. */
    readonly database: Database,
    /** The options, resolved and frozen. */
    readonly options: DeferflowOptions,
    registry: TriggerRegistry,
    log: Logger,
    /** The migrations open() applied (none when the database was up to date, or with migrate: false). */
    readonly appliedMigrations: readonly string[],
    tracing: Tracing | null,
  ) {
    this.#log = log;
    this.#tracing = tracing;
    const several = [options.worker, options.scheduler, options.triggerer].filter(Boolean).length > 1;
    const child = (component: string) => (several ? log.child({ component }) : log);
    this.#dagProcessingLog = child('dag-processor');
    this.#httpLog = child('http');
    // One set of stores and one metrics registry for the process's daemons.
    const runtime = { metrics: this.metrics, stores: openStores(database), tracing };
    this.triggerer = options.triggerer ? new Triggerer(database, options.triggerer, registry, child('triggerer'), runtime) : null;
    this.scheduler = options.scheduler ? new Scheduler(database, options.scheduler, serializedDagSource(database), child('scheduler'), runtime) : null;
    this.worker = options.worker
      ? new Worker(database, options.worker, taskRunnerOf(database, options.worker, child('worker')), child('worker'), runtime)
      : null;
    // The scheduler and the triggerer pace the passes wake-ups start (WOKEN_PASS_PACING): a storm
    // of finished tasks is not a pass each.
    const wakeWorker = () => this.worker?.wake();
    const wakeScheduler = () => this.scheduler?.wake();
    const wakeTriggerer = () => this.triggerer?.wake();
    const wakeRunWatchers = () => this.#wakeRunWatchers();
    if (this.worker) {
      this.worker.onWork = () => {
        wakeTriggerer();
        wakeScheduler();
      };
    }
    if (this.scheduler) {
      this.scheduler.onWork = () => {
        wakeWorker();
        this.worker?.lookForStopRequests();
        wakeTriggerer();
        wakeRunWatchers();
      };
    }
    if (this.triggerer) {
      this.triggerer.onWork = () => {
        wakeWorker();
        wakeScheduler();
      };
    }
  }

  /**
   * What the HTTP endpoint serves besides /metrics and /health: POST /signals/:key when the
   * triggerer has a signal token, then `extraRoutes` (standalone's status page).
   */
  #routes(): ExtraRoutes {
    const token = this.options.triggerer?.signalHttpToken ?? null;
    const signals = token === null ? null : signalRoute(token, (key, value, from) => this.#sendAndReport(key, value, from));
    const extra = this.extraRoutes;
    return async (request) => (await signals?.(request)) ?? (await extra?.(request)) ?? null;
  }

  /** Sends a signal and says who it reached (POST /signals/:key, from `from`: the client's address). */
  async #sendAndReport(key: string, value: JsonValue, from: string | null): Promise<SentSignal> {
    const audience = await signalAudience(this.database, key, value);
    return { version: await SignalService.of(this.database, this.#log).send(key, value, `POST /signals${from === null ? '' : ` (${from})`}`), audience };
  }

  /** Processes the DAG folder (when a worker runs here), then starts the triggerer, the scheduler and the worker. */
  async start(): Promise<void> {
    if (this.#state !== 'new') throw new LifecycleError('deferflow', this.#state);
    this.#state = 'running';
    // Its first runner process boots meanwhile (bench:runtime: the first task no longer waits for it).
    this.worker?.prewarm();
    if (this.options.triggerer?.signalHttpToken && !this.options.http) {
      this.#httpLog.warn(
        { code: 'DF_INVALID_OPTION' },
        'a signal token is set but the HTTP endpoint is off (--http-port off): POST /signals/:key is not served; give --http-port (0: any free one)',
      );
    }
    if (this.options.http) {
      // First: a port that cannot be had fails the start before any job row is written.
      const daemons = [this.triggerer, this.scheduler, this.worker].filter((daemon) => daemon !== null);
      this.#http = new ObservabilityServer(this.options.http, this.metrics, daemons, this.#httpLog, this.#routes());
      const address = await this.#http.start();
      if (address && this.options.triggerer?.signalHttpToken)
        this.#httpLog.info({ host: address.address, port: address.port }, `signal endpoint: POST http://${address.address}:${address.port}/signals/:key`);
    }
    try {
      if (this.worker) {
        // The worker imports DAG files anyway, so it keeps the serialized DAGs current.
        this.#dagProcessing = await keepDagFolderProcessed(
          this.database,
          this.options.dagsFolder,
          this.options.worker!.dagProcessIntervalMs,
          this.#dagProcessingLog,
        );
      }
      // A stop() that comes while this starts (SIGTERM during the start) stops what has started;
      // what has not is not started after it.
      for (const daemon of [this.triggerer, this.scheduler, this.worker]) {
        if (this.#stopped !== null) return;
        await daemon?.start();
      }
    } catch (error) {
      if (this.#stopped !== null && error instanceof LifecycleError) return;
      // What can fail here besides deferflow's own coded refusals is the database (user code's
      // failures are import errors, recorded): lost between open() and start, as in an outage
      // that begins just then. Coded and named, so a supervisor's log says what to fix.
      throw unreachable(this.options.databaseUrl, error);
    }
  }

  /**
   * Stops the worker first (its running tasks get the shutdown grace, then are handed back), then
   * the scheduler, then the triggerer (its triggers go back to peers); then closes the database,
   * unless `keepDatabaseOpen` (the caller still reads it, and closes it).
   */
  stop(options: { keepDatabaseOpen?: boolean } = {}): Promise<void> {
    this.#stopped ??= this.#shutdown(options.keepDatabaseOpen === true);
    return this.#stopped;
  }

  async #shutdown(keepDatabaseOpen: boolean): Promise<void> {
    this.#state = 'stopped';
    this.#wakeRunWatchers();
    this.#dagProcessing?.stop();
    await this.worker?.stop();
    await this.scheduler?.stop();
    await this.triggerer?.stop();
    await this.#http?.stop();
    // The spans still batched go now; an exporter that cannot send them costs only them.
    await this.#tracing?.shutdown().catch((error: unknown) => this.#log.warn({ error: describeThrown(error).error }, 'sending the last traces failed'));
    if (!keepDatabaseOpen) await this.database.close();
  }

  /** Where /metrics and /health are served; null when they are not. */
  get httpAddress(): AddressInfo | null {
    return this.#http?.address ?? null;
  }

  #wakeRunWatchers(): void {
    this.#runWatchers.wakeAll();
  }

  /**
   * Creates a manual run of a DAG (it must have been processed: a worker here processes the DAG
   * folder at start) and returns its run id. DF_INVALID_OPTION for an unknown DAG or a run id
   * it already has.
   */
  triggerDagRun(dagId: string, options: ManualRunOptions = {}): Promise<string> {
    return triggerDagRun(this.database, dagId, options);
  }

  /** Sends a signal on `key` (AIP-35); resolves with its version. See sendSignal. */
  sendSignal(key: string, value: JsonValue = null): Promise<number> {
    return SignalService.of(this.database, this.#log).send(key, value, 'api');
  }

  /** The key's signals after `sinceVersion` (default 0), oldest first. See listSignals. */
  listSignals(key: string, options: { sinceVersion?: number; limit?: number } = {}): Promise<Signal[]> {
    return SignalService.of(this.database, this.#log).list(key, options);
  }

  /** Calls `listener` with each new signal of `key` (after `sinceVersion`, default the latest), in order, once each. */
  listenSignal(key: string, listener: SignalListener, options: { sinceVersion?: number } = {}): Promise<SignalSubscription> {
    return SignalService.of(this.database, this.#log).listen(key, listener, options);
  }

  /**
   * Answers a task instance's question to a person (human input: awaitInput, ApprovalOperator,
   * BranchChoiceOperator, InputOperator) as `answer.by`, by its id or its DAG, run and task;
   * resolves with the response recorded, and the task resumes on the next free worker slot. The
   * first response wins: a later one is refused with DF_INPUT_ALREADY_GIVEN naming who answered
   * and when; DF_INVALID_INPUT_RESPONSE for one that does not answer the question;
   * DF_NOT_AWAITING_INPUT for a task instance that asks nothing.
   */
  async respondToInput(
    taskInstance: number | { readonly dagId: string; readonly runId: string; readonly taskId: string; readonly mapIndex?: number },
    answer: GivenAnswer,
  ): Promise<InputResponse> {
    const stores = openStores(this.database);
    const id =
      typeof taskInstance === 'number'
        ? taskInstance
        : (await stores.taskInstances.readTaskInstance({ ...taskInstance, mapIndex: taskInstance.mapIndex ?? -1 }))?.id;
    if (id === undefined) throw new NotAwaitingInputError(`there is no task instance ${JSON.stringify(taskInstance)}`);
    const response = await new InputService(stores).respond(id, answer, 'api');
    // Its task resumes on this process's worker at once, not at its next poll.
    this.worker?.wake();
    return response;
  }

  /** The run's state now: queued, running, success or failed; null when there is no such run. */
  async dagRunState(dagId: string, runId: string): Promise<DagRunState | null> {
    return (await openStores(this.database).dagRuns.runProgress(dagId, runId))?.state ?? null;
  }

  /**
   * Resolves with the run's final state once it has one (success or failed). Refused
   * (DF_INVALID_OPTION) for a run that does not exist; DF_LIFECYCLE if deferflow stops first.
   */
  async waitForDagRun(dagId: string, runId: string): Promise<'success' | 'failed'> {
    for (;;) {
      if (this.#state === 'stopped') throw new LifecycleError('deferflow', 'stopped', `deferflow stopped before run ${runId} of ${dagId} finished`);
      const state = await this.dagRunState(dagId, runId);
      if (state === null) throw new InvalidOptionError('runId', `DAG ${dagId} has no run ${JSON.stringify(runId)}`);
      if (state === 'success' || state === 'failed') return state;
      await this.#runWatchers.sleep(RUN_POLL_MS);
    }
  }
}

/** A killed task's runner gets this long to end on its own after its signal aborts. */
const RUNNER_KILL_GRACE_MS = 1_000;

/** Where the worker's task code runs, as --task-isolation says. */
function taskRunnerOf(database: Database, options: ResolvedWorkerOptions, log: Logger): TaskResolver | TaskRunner {
  if (options.taskIsolation === 'none') return dagFileResolver(database, { smartSensors: options.smartSensors, publicUrl: options.publicUrl });
  return new ProcessTaskRunner(
    {
      maxTasks: options.runnerMaxTasks,
      maxMemoryMb: options.runnerMaxMemoryMb,
      killGraceMs: RUNNER_KILL_GRACE_MS,
      slots: options.concurrency,
      smartSensors: options.smartSensors,
    },
    taskServices(database, { publicUrl: options.publicUrl }),
    log,
  );
}
