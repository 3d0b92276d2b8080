import type { Logger } from 'pino';
import { codeOf, describeThrown, TriggerFailedError, TriggerRuntimeError, withoutDeferflowFrames } from '../../vocabulary/errors.ts';
import { toJsonText, type JsonObject, type JsonValue } from '../../vocabulary/serialization/json.ts';
import { attachRuntime, constructTrigger, type BaseTrigger, type TriggerRuntime } from '../../authoring/triggers/base-trigger.ts';
import { CompositeTrigger } from '../../authoring/triggers/composite-trigger.ts';
import type { TriggerRegistry } from '../../authoring/triggers/registry.ts';
import type { SensorClass } from '../../authoring/sensors/sensor-class.ts';
import { TASK_END_STATES, type TaskEndState, type TriggerEvent, type WatchEvents } from '../../authoring/triggers/trigger-event.ts';
import type { OwnedDigest, TriggerOutcome, TriggerRow, WatchBatch, WatchBatchResult } from '../../storage/index.ts';
import { DeadlineQueue, type DeadlineWaiter } from './deadline-queue.ts';
import { LoopWatch } from './loop-watch.ts';
import type { TriggererMetrics } from '../../services/observability/metrics.ts';
import type { TriggerLogWriter } from './trigger-log-writer.ts';
import { secretKwargValues } from '../../services/logs/secret-masker.ts';
import type { DagRunStates, DagRunStatesQuery, DagRunStatesReader } from '../../model/dag-run-states.ts';
import type { Signal } from '../../model/signal.ts';
import type { SignalListener, SignalSubscription } from '../../services/signals/signal-service.ts';
import {
  UpstreamHub,
  type HubSubscription,
  type UpstreamFilter,
  type UpstreamSource,
  type UpstreamSubscription,
} from '../../authoring/triggers/upstream-hub.ts';

/** Where a runner hands what its triggers produced: the outcome writer, which batches them into the database. */
export interface OutcomeSink {
  add(outcome: TriggerOutcome): void;
}

/** Where a runner hands a watcher's batch: written (runs and cursor, one transaction) before the promise settles. */
export interface WatchSink {
  write(batch: WatchBatch): Promise<WatchBatchResult>;
}

/** The longest a key of a watched event may be (it becomes a run id). */
export const WATCH_KEY_MAX = 200;
/** A failed watcher is run again after this, doubling with each failure in a row, up to WATCH_RETRY_MAX_MS. */
const WATCH_RETRY_FIRST_MS = 2_000;
const WATCH_RETRY_MAX_MS = 120_000;

export interface TriggerRunnerOptions {
  /** A trigger step that keeps the event loop longer than this is logged by name. */
  readonly blockThresholdMs: number;
  /** Where triggers' this.dagRunStates() reads go (the triggerer's batched reader); none: such reads fail. */
  readonly dagRunStates?: DagRunStatesReader;
  /** Where triggers' this.nextSignal() listens (the triggerer's signal service); none: such waits fail. */
  readonly listenSignal?: (key: string, listener: SignalListener, options: { sinceVersion: number }) => Promise<SignalSubscription>;
  /** Counts blocked steps, failures and events by classpath. */
  readonly metrics?: TriggererMetrics;
  /** Where triggers' this.log lines are stored (the triggerer's); none: the runner's log only. */
  readonly triggerLogs?: TriggerLogWriter;
  /** Told the id of the trigger whose step starts, and 0 when it ends (the watchdog's culprit). */
  readonly stepping?: (triggerId: number) => void;
  /** Where watchers' batches are written (the triggerer's); none: a watcher fails at its first batch. */
  readonly watchSink?: WatchSink;
  /** Told of each run's start and end (the triggerer's spans, with tracing on); none: nothing is. */
  readonly runs?: {
    started(triggerId: number, classpath: string): void;
    /** `endState`: its event ended its task instances (a TaskEndEvent). */
    ended(triggerId: number, how: Exclude<RunState, 'running'>, endState: TaskEndState | null): void;
  };
}

/*
 * A run's life:
 *
 *   running ──first event──▶ fired  ──outcome written──▶ (forgotten)
 *      │  └──throws / ends──▶ failed ──outcome written──▶ (forgotten)
 *      └──cancel (lost ownership, deleted, shutdown)──▶ stopped (forgotten at once; nothing written)
 *
 * Every path out of running stops the generator and runs cleanup() exactly once.
 */
type RunState = 'running' | 'fired' | 'failed' | 'stopped';
type TriggerGenerator = AsyncGenerator<TriggerEvent | WatchEvents, void, void>;

/*
 * A watcher's run (a trigger DAGs are scheduled on) stays running across its batches:
 *
 *   running ──yields WatchEvents──▶ batch written (runs + cursor, one transaction) ──▶ running (the yield returns)
 *      │                                  └──the watcher is no longer ours──▶ stopped
 *      └──throws / ends──▶ failed ──after a backoff──▶ (forgotten: the next pass runs it again, from its cursor)
 */

/** What the runner keeps for a watcher only (most triggers are waits and keep none). */
interface WatcherState {
  cursor: JsonValue | null;
  /** Failures in a row (reset by a batch written): the backoff before it runs again. */
  failures: number;
}

class TriggerRun implements TriggerRuntime, DeadlineWaiter {
  wakeAt = 0;
  heapIndex = -1;
  resolveWait: (() => void) | null = null;
  rejectWait: ((reason: unknown) => void) | null = null;
  state: RunState = 'running';
  generator: TriggerGenerator | null = null;
  cleanupStarted = false;
  // Made on first use: an AbortSignal is an EventTarget with its own maps and shapes, several
  // hundred bytes a trigger that most triggers (a sleep in the shared timer queue) never need.
  #controller: AbortController | undefined;
  #log: Logger | undefined;
  // Rejecters of this trigger's reads in flight, so a cancel stops a trigger awaiting one at once.
  // Arrays, not Sets: a trigger has one or two, and a Set costs ~150 bytes more a trigger.
  #reads: ((reason: unknown) => void)[] | undefined;
  // The shared upstreams it reads, left when it stops.
  #upstreams: HubSubscription[] | undefined;

  constructor(
    readonly id: number,
    readonly classpath: string,
    readonly trigger: BaseTrigger,
    readonly runner: TriggerRunner,
  ) {}

  get signal(): AbortSignal {
    this.#controller ??= new AbortController();
    // Asked for after the trigger began stopping: it is aborted already.
    if (this.cleanupStarted && !this.#controller.signal.aborted) this.#controller.abort(CANCELLED);
    return this.#controller.signal;
  }

  /** Aborts the signal, if anyone ever asked for it. */
  abort(): void {
    this.#controller?.abort(CANCELLED);
  }

  sleepUntil(epochMs: number): Promise<void> {
    return this.runner.sleepUntil(this, epochMs);
  }

  get watching(): boolean {
    return this.runner.watcherState(this.id) !== undefined;
  }

  get cursor(): JsonValue | null {
    return this.runner.watcherState(this.id)?.cursor ?? null;
  }

  logger(): Logger {
    this.#log ??= this.runner.triggerLogger(this);
    return this.#log;
  }

  sensorClass(classpath: string): SensorClass {
    return this.runner.resolveSensor(classpath);
  }

  dagRunStates(query: DagRunStatesQuery): Promise<DagRunStates | null> {
    return this.#untilCancelled((resolve, reject) => {
      this.runner.readDagRunStates(query).then(resolve, reject);
      return () => {};
    });
  }

  nextSignal(key: string, afterVersion: number, accept: (signal: Signal) => boolean = () => true): Promise<Signal> {
    return this.#untilCancelled<Signal>((resolve, reject) => {
      let subscription: SignalSubscription | null = null;
      let released = false;
      this.runner
        .listenSignal(
          key,
          (signal) => {
            if (accept(signal)) resolve(signal);
          },
          { sinceVersion: afterVersion },
        )
        .then((made) => {
          subscription = made;
          if (released) made.close();
        }, reject);
      return () => {
        released = true;
        subscription?.close();
      };
    });
  }

  upstream<B extends JsonValue>(source: UpstreamSource<B>, filter: UpstreamFilter<B>): UpstreamSubscription<B> {
    if (this.cleanupStarted) throw CANCELLED;
    const subscription = this.runner.upstreams.subscribe(source, filter);
    // Handed over as it is, no wrapper: cancelling the run cancels it (abortReads), and a wait holds
    // nothing more than its one pending promise. Those closed already are dropped as others come.
    if (this.#upstreams === undefined) this.#upstreams = [];
    else if (this.#upstreams.length >= 8) this.#upstreams = this.#upstreams.filter((held) => !held.closed);
    this.#upstreams.push(subscription as unknown as HubSubscription);
    return subscription;
  }

  /**
   * A wait that cancelling the trigger rejects at once (AbortError). `start` begins it and
   * returns what releases it; that runs once, however the wait ends.
   */
  #untilCancelled<T>(start: (resolve: (value: T) => void, reject: (error: unknown) => void) => () => void): Promise<T> {
    if (this.cleanupStarted) return Promise.reject(CANCELLED);
    return new Promise<T>((resolve, reject) => {
      let settled = false;
      let release: (() => void) | null = null;
      const settle = (finish: () => void) => {
        if (settled) return;
        settled = true;
        removeFrom(this.#reads, cancel);
        release?.();
        finish();
      };
      const cancel = (reason: unknown) => settle(() => reject(reason));
      this.#reads ??= [];
      this.#reads.push(cancel);
      const stop = start(
        (value) => settle(() => resolve(value)),
        (error) => settle(() => reject(error)),
      );
      if (settled) stop();
      else release = stop;
    });
  }

  /** Rejects the reads in flight and leaves the shared upstreams (the trigger is stopping). */
  abortReads(): void {
    if (this.#upstreams) {
      for (const subscription of this.#upstreams) subscription.cancel(CANCELLED);
      this.#upstreams = undefined;
    }
    if (!this.#reads) return;
    // Each rejecter removes itself as it runs: iterate over a copy.
    for (const reject of [...this.#reads]) reject(CANCELLED);
    this.#reads = undefined;
  }
}

/**
 * The one reason every cancelled sleep and aborted signal carries. Shared, because building a
 * DOMException captures a stack (~10 µs): 100,000 of them would stall a mass cancel.
 */
const CANCELLED: DOMException = new DOMException('the trigger was cancelled', 'AbortError');

/**
 * Runs triggers as async generators on this one event loop. It knows nothing of the database:
 * the triggerer tells it what to start and cancel, and hears back through RunnerOutcomes.
 * Per trigger it keeps one small record (also the trigger's slot in the shared timer heap) and
 * the generator; loggers are made on first use.
 */
export class TriggerRunner {
  readonly #runs = new Map<number, TriggerRun>();
  /** Triggers whose class or kwargs could not be built: failure reported, not yet written. */
  readonly #unbuildable = new Set<number>();
  /**
   * Composite waits held (anyOf, allOf): each only waits for its members' outcomes, which the
   * event writer resolves in the database, so it gets no run, no generator and no timer, just
   * its id here (a generator that only slept cost ~1.4 KB a wait). Running until cancelled.
   */
  readonly #composites = new Set<number>();
  /** Watchers held, with their cursors (see WatcherState). */
  readonly #watchers = new Map<number, WatcherState>();
  readonly #watchSink: WatchSink | undefined;
  /** Watchers let go after failing, with their failures in a row: the backoff when they fail again. */
  readonly #retryFailures = new Map<number, number>();
  #upstreams: UpstreamHub | undefined;
  #heldCount = 0;
  #heldIdSum = 0;
  #runningCount = 0;
  /**
   * One string per classpath for every run: each row read brings its own copy (56 bytes for
   * DateTimeTrigger's), a twentieth of what a waiting trigger costs. Classpaths are few: those
   * of the registry and its aliases.
   */
  readonly #classpaths = new Map<string, string>();
  readonly #timers: DeadlineQueue<TriggerRun>;
  readonly #watch: LoopWatch<TriggerRun>;
  readonly #dagRunStates: DagRunStatesReader | undefined;
  readonly #listenSignal: TriggerRunnerOptions['listenSignal'];
  readonly #metrics: TriggererMetrics | undefined;
  readonly #triggerLogs: TriggerLogWriter | undefined;
  readonly #stepping: (triggerId: number) => void;
  readonly #runListener: TriggerRunnerOptions['runs'];

  constructor(
    private readonly registry: TriggerRegistry,
    readonly log: Logger,
    private readonly outcomes: OutcomeSink,
    options: TriggerRunnerOptions,
  ) {
    this.#dagRunStates = options.dagRunStates;
    this.#listenSignal = options.listenSignal;
    const metrics = options.metrics;
    this.#metrics = metrics;
    this.#triggerLogs = options.triggerLogs;
    this.#watchSink = options.watchSink;
    this.#runListener = options.runs;
    const stepping = options.stepping ?? (() => {});
    this.#stepping = stepping;
    this.#watch = new LoopWatch<TriggerRun>(
      options.blockThresholdMs,
      ({ subject, blockedMs }) => {
        metrics?.blockedMainThread.inc({ classpath: subject.classpath });
        metrics?.blockedMainThreadSeconds.inc({ classpath: subject.classpath }, blockedMs / 1000);
        // A consolidated sensor names its sensor class and poke context: the classpath alone is every sensor's.
        const wait = subject.trigger.describeWait();
        this.log.warn(
          { trigger_id: subject.id, classpath: subject.classpath, ...(wait === '' ? {} : { wait }), blocked_ms: Math.round(blockedMs) },
          `trigger ${subject.id} (${subject.classpath}${wait === '' ? '' : `: ${wait}`}) blocked the event loop for ${Math.round(blockedMs)} ms; ` +
            'move blocking work off the loop (await an async API or a worker thread)',
        );
      },
      (blockedMs, steps) =>
        steps > 0
          ? this.log.debug({ blocked_ms: Math.round(blockedMs), trigger_steps: steps }, 'event loop busy running trigger steps')
          : this.log.warn(
              { blocked_ms: Math.round(blockedMs) },
              `the event loop was blocked for ${Math.round(blockedMs)} ms by code that no trigger step accounts for`,
            ),
    );
    this.#timers = new DeadlineQueue<TriggerRun>({
      beforeResume: (run) => {
        this.#watch.mark();
        stepping(run.id);
      },
      afterResume: (run) => {
        this.#watch.checkpoint(run);
        stepping(0);
      },
    });
  }

  start(): void {
    this.#watch.start();
  }

  /** Marks the end of work the runner does not see (a database call), for blocking attribution. */
  markLoopEdge(): void {
    this.#watch.mark();
  }

  /** Triggers held: running, or finished with an outcome not yet written. */
  get size(): number {
    return this.#runs.size + this.#unbuildable.size + this.#composites.size;
  }

  /** Triggers running (not yet fired, failed or stopped): kept as runs change state, since a pass asks for it and there may be a million. */
  get runningCount(): number {
    return this.#runningCount;
  }

  has(triggerId: number): boolean {
    return this.#runs.has(triggerId) || this.#unbuildable.has(triggerId) || this.#composites.has(triggerId);
  }

  isRunning(triggerId: number): boolean {
    return this.#runs.get(triggerId)?.state === 'running' || this.#composites.has(triggerId);
  }

  /** Ids of triggers held (see size). */
  heldIds(): number[] {
    return [...this.#runs.keys(), ...this.#unbuildable, ...this.#composites];
  }

  /**
   * The count and id sum of the triggers held, kept as they come and go: the triggerer compares
   * it with the same digest of the rows it owns, so a pass learns "nothing changed" without
   * reading 100,000 ids. Trigger ids are never reused, so any single change shows.
   */
  heldDigest(): OwnedDigest {
    return { count: this.#heldCount, idSum: this.#heldIdSum };
  }

  #held(triggerId: number): void {
    this.#heldCount++;
    this.#heldIdSum += triggerId;
  }

  #released(triggerId: number): void {
    this.#triggerLogs?.forget(triggerId);
    this.#watchers.delete(triggerId);
    this.#heldCount--;
    this.#heldIdSum -= triggerId;
  }

  startTrigger(row: TriggerRow): void {
    if (this.has(row.id)) return;
    let trigger: BaseTrigger;
    try {
      // Encrypted kwargs without their key: this trigger's task instances fail, naming the key.
      if (row.unreadable) throw row.unreadable;
      const cls = this.registry.resolve(row.classpath);
      trigger = constructTrigger(cls, JSON.parse(row.kwargs) as JsonObject);
    } catch (error) {
      this.#unbuildable.add(row.id);
      this.#held(row.id);
      // A watcher has no task instances to fail: it is tried again later (a class deployed since).
      if (row.watcher)
        this.#retryWatcherLater(row.id, row.classpath, this.#retryFailures.get(row.id) ?? 0, error, undefined, () => this.#unbuildable.has(row.id));
      else this.#reportFailure(row.id, row.classpath, error, 'could not be built from its row');
      return;
    }
    if (trigger instanceof CompositeTrigger) {
      this.#composites.add(row.id);
      this.#runningCount++;
      this.#held(row.id);
      return;
    }
    const run = new TriggerRun(row.id, this.#interned(row.classpath), trigger, this);
    if (row.watcher)
      this.#watchers.set(row.id, { cursor: row.cursor == null ? null : (JSON.parse(row.cursor) as JsonValue), failures: this.#retryFailures.get(row.id) ?? 0 });
    attachRuntime(trigger, run);
    this.#runs.set(row.id, run);
    this.#runningCount++;
    this.#held(row.id);
    this.#runListener?.started(row.id, run.classpath);
    try {
      // A run() that declares no parameter gets no signal, so none is made (see TriggerRun).
      run.generator = trigger.run.length === 0 ? (trigger.run as () => TriggerGenerator).call(trigger) : trigger.run(run.signal);
    } catch (error) {
      this.#fail(run, error);
      return;
    }
    this.#step(run);
  }

  /**
   * Stops a trigger without writing anything. `killed`: nothing waits on it any more (its row
   * was deleted, its task instances cleared): onKill() runs before cleanup(). Otherwise (lost
   * ownership, shutdown) another triggerer may run it next, and only cleanup() runs.
   */
  cancel(triggerId: number, killed = false): Promise<void> {
    if (this.#unbuildable.delete(triggerId)) this.#released(triggerId);
    if (this.#composites.delete(triggerId)) {
      this.#runningCount--;
      this.#released(triggerId);
      return Promise.resolve();
    }
    const run = this.#runs.get(triggerId);
    if (!run) return Promise.resolve();
    this.#runs.delete(triggerId);
    this.#released(triggerId);
    this.#leaveRunning(run, 'stopped');
    return this.#stopRun(run, killed);
  }

  /** Cancels every running trigger, waiting up to `timeoutMs` for their cleanups. */
  async cancelAll(timeoutMs: number): Promise<void> {
    for (const id of [...this.#composites]) void this.cancel(id);
    const running = [...this.#runs.values()].filter((run) => run.state === 'running').map((run) => this.cancel(run.id));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.allSettled(running), new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)))]);
    clearTimeout(timer);
  }

  /** The trigger's outcome is in the database: let it go. */
  forget(triggerId: number): void {
    if (this.#unbuildable.delete(triggerId)) this.#released(triggerId);
    const run = this.#runs.get(triggerId);
    if (run && run.state !== 'running') {
      this.#runs.delete(triggerId);
      this.#released(triggerId);
    }
  }

  close(): void {
    this.#watch.stop();
    this.#timers.close();
    void this.#upstreams?.close();
  }

  /** The shared upstream readers of this runner's triggers (one per stream), made on first use. */
  get upstreams(): UpstreamHub {
    this.#upstreams ??= new UpstreamHub({
      onReaderError: (key, error) =>
        this.log.warn(
          { upstream: key, error: describeThrown(error).error },
          `shared upstream ${key} failed: ${describeThrown(error).error}; its triggers fail with it`,
        ),
      warn: (key, message) => this.log.warn({ upstream: key }, `shared upstream ${key}: ${message}`),
    });
    return this.#upstreams;
  }

  /** Shared upstream readers open. */
  get upstreamReaderCount(): number {
    return this.#upstreams?.readerCount ?? 0;
  }

  /** A watcher's state; undefined for a wait. */
  watcherState(triggerId: number): WatcherState | undefined {
    return this.#watchers.get(triggerId);
  }

  resolveSensor(classpath: string): SensorClass {
    return this.registry.resolveSensor(classpath);
  }

  readDagRunStates(query: DagRunStatesQuery): Promise<DagRunStates | null> {
    if (!this.#dagRunStates) return Promise.reject(new TriggerRuntimeError('this trigger runner reads no database: DAG run states are not available'));
    return this.#dagRunStates(query);
  }

  listenSignal(key: string, listener: SignalListener, options: { sinceVersion: number }): Promise<SignalSubscription> {
    if (!this.#listenSignal) return Promise.reject(new TriggerRuntimeError('this trigger runner reads no database: signals are not available'));
    return this.#listenSignal(key, listener, options);
  }

  /** A trigger's this.log: stored as its trigger log when the runner has a writer, masking its secret kwargs. */
  triggerLogger(run: TriggerRun): Logger {
    if (!this.#triggerLogs) return this.log.child({ trigger_id: run.id, classpath: run.classpath });
    return this.#triggerLogs.logger(run.id, run.classpath, secretsOf(run.trigger));
  }

  sleepUntil(run: TriggerRun, epochMs: number): Promise<void> {
    this.#watch.checkpoint(run);
    if (run.state !== 'running') return Promise.reject(CANCELLED);
    return this.#timers.wait(run, epochMs);
  }

  #step(run: TriggerRun): void {
    this.#watch.mark();
    this.#stepping(run.id);
    const pending = run.generator!.next();
    this.#stepping(0);
    this.#watch.checkpoint(run);
    pending.then(
      (result) => this.#onStep(run, result),
      (error: unknown) => {
        if (run.state === 'running') this.#fail(run, error);
      },
    );
  }

  #onStep(run: TriggerRun, result: IteratorResult<TriggerEvent | WatchEvents, void>): void {
    if (run.state !== 'running') return;
    this.#watch.checkpoint(run);
    const watcher = this.#watchers.get(run.id);
    if (watcher) {
      this.#onWatchStep(run, watcher, result);
      return;
    }
    if (result.done) {
      this.#fail(run, new TriggerFailedError('the trigger ended without yielding an event'));
      return;
    }
    let payloadJson: string;
    let endState: TaskEndState | null = null;
    try {
      const event: unknown = result.value;
      if (event !== null && typeof event === 'object' && 'events' in event && 'cursor' in event)
        throw new TriggerFailedError('the trigger yielded WatchEvents, but it runs as a wait (a task deferred on it), not as a watcher: yield a TriggerEvent');
      if (event === null || typeof event !== 'object' || !('payload' in event)) {
        throw new TriggerFailedError(`the trigger yielded ${describe(event)} instead of a TriggerEvent`);
      }
      // Checked by shape, not instanceof: a trigger module may carry its own copy of deferflow.
      if ('taskState' in event) {
        if (!TASK_END_STATES.includes(event.taskState as TaskEndState)) {
          throw new TriggerFailedError(
            `the trigger yielded an end event with taskState ${JSON.stringify(event.taskState) ?? describe(event.taskState)}; expected one of ${TASK_END_STATES.join(', ')}`,
          );
        }
        endState = event.taskState as TaskEndState;
      }
      payloadJson = toJsonText(event.payload, 'event.payload');
    } catch (error) {
      this.#fail(run, error);
      return;
    }
    this.#leaveRunning(run, 'fired', endState);
    this.#metrics?.succeeded.inc({ classpath: run.classpath });
    this.outcomes.add({ kind: 'event', triggerId: run.id, payloadJson, endState, firedAt: performance.now() });
    void this.#stopRun(run);
  }

  /** A watcher's step: its batch is written before it steps again (see the watcher's life above). */
  #onWatchStep(run: TriggerRun, watcher: WatcherState, result: IteratorResult<TriggerEvent | WatchEvents, void>): void {
    let batch: WatchBatch;
    try {
      if (result.done) throw new TriggerFailedError('the watcher ended; a watcher runs for as long as a DAG is scheduled on it');
      batch = watchBatchOf(run, result.value);
      if (!this.#watchSink) throw new TriggerRuntimeError('this trigger runner writes no database: watchers cannot run here');
    } catch (error) {
      this.#fail(run, error);
      return;
    }
    this.#watchSink.write(batch).then(
      (written) => {
        if (run.state !== 'running') return;
        if (written.kind === 'lost') {
          this.log.warn({ trigger_id: run.id, classpath: run.classpath }, `watcher ${run.id} (${run.classpath}) is no longer this triggerer's; stopping it`);
          void this.cancel(run.id);
          return;
        }
        watcher.cursor = JSON.parse(batch.cursorJson) as JsonValue;
        watcher.failures = 0;
        this.#retryFailures.delete(run.id);
        if (batch.events.length > 0) this.#metrics?.succeeded.inc({ classpath: run.classpath }, batch.events.length);
        this.#step(run);
      },
      (error: unknown) => {
        if (run.state === 'running') this.#fail(run, error);
      },
    );
  }

  #interned(classpath: string): string {
    const known = this.#classpaths.get(classpath);
    if (known !== undefined) return known;
    this.#classpaths.set(classpath, classpath);
    return classpath;
  }

  /** A run's one way out of running (see the life at the top): the state it ends in, counted. */
  #leaveRunning(run: TriggerRun, state: Exclude<RunState, 'running'>, endState: TaskEndState | null = null): void {
    if (run.state !== 'running') return;
    run.state = state;
    this.#runningCount--;
    this.#runListener?.ended(run.id, state, endState);
  }

  #fail(run: TriggerRun, error: unknown): void {
    this.#leaveRunning(run, 'failed');
    const watcher = this.#watchers.get(run.id);
    if (watcher) this.#failWatcher(run, watcher, error);
    else this.#reportFailure(run.id, run.classpath, error, 'failed', run.trigger);
    void this.#stopRun(run);
  }

  /**
   * A watcher that failed has no task instances to fail: it is logged, and held (not run) for a
   * backoff, then let go, so that the next pass runs it again from its cursor.
   */
  #failWatcher(run: TriggerRun, watcher: WatcherState, error: unknown): void {
    this.#retryWatcherLater(run.id, run.classpath, watcher.failures, error, run.trigger, () => this.#runs.get(run.id) === run);
  }

  /**
   * Logs a watcher's failure and, after a backoff that doubles with each failure in a row, lets it
   * go (if `stillHeld`: it was not cancelled meanwhile), so that the next pass runs it again.
   */
  #retryWatcherLater(id: number, classpath: string, failuresBefore: number, error: unknown, trigger: BaseTrigger | undefined, stillHeld: () => boolean): void {
    this.#metrics?.failed.inc({ classpath });
    const masker = this.#triggerLogs?.masker.with(trigger ? secretsOf(trigger) : []);
    const described = describeThrown(error);
    const message = masker ? masker.mask(described.error) : described.error;
    const retryMs = Math.min(WATCH_RETRY_FIRST_MS * 2 ** failuresBefore, WATCH_RETRY_MAX_MS);
    this.log.error(
      { code: codeOf(error, 'DF_TRIGGER_FAILED'), trigger_id: id, classpath, error: message, retry_in_ms: retryMs },
      `watcher ${id} (${classpath}) failed: ${message}; it runs again in ${Math.round(retryMs / 1000)} s from its cursor`,
    );
    setTimeout(() => {
      if (!stillHeld()) return;
      this.#runs.delete(id);
      this.#unbuildable.delete(id);
      this.#released(id);
      // Kept across the restart: the next failure waits longer.
      this.#retryFailures.set(id, failuresBefore + 1);
    }, retryMs).unref();
  }

  #reportFailure(triggerId: number, classpath: string, error: unknown, what: string, trigger?: BaseTrigger): void {
    this.#metrics?.failed.inc({ classpath });
    // What a trigger threw may quote its secrets (a password in an auth error): masked like its lines.
    const masker = this.#triggerLogs?.masker.with(trigger ? secretsOf(trigger) : []);
    const described = describeThrown(error);
    // The trigger's own frames are what its task's log shows; deferflow's around them say nothing.
    const thrown = { error: described.error, traceback: described.traceback === null ? null : withoutDeferflowFrames(described.traceback) };
    const failure = masker ? { error: masker.mask(thrown.error), traceback: thrown.traceback === null ? null : masker.mask(thrown.traceback) } : thrown;
    // Anything a trigger throws that is not one of deferflow's own errors is DF_TRIGGER_FAILED.
    const code = codeOf(error, 'DF_TRIGGER_FAILED');
    this.log.error(
      { code, trigger_id: triggerId, classpath, error: failure.error, traceback: failure.traceback },
      `trigger ${triggerId} (${classpath}) ${what}: ${failure.error}; failing its task instances [${code}]`,
    );
    this.outcomes.add({ kind: 'failure', triggerId, failure: { code, ...failure, reason: 'trigger_failure' } });
  }

  async #stopRun(run: TriggerRun, killed = false): Promise<void> {
    if (run.cleanupStarted) return;
    run.cleanupStarted = true;
    this.#timers.cancel(run, CANCELLED);
    run.abortReads();
    run.abort();
    run.generator?.return(undefined).catch(() => {});
    if (killed) {
      try {
        await run.trigger.onKill();
      } catch (error) {
        this.log.warn(
          { trigger_id: run.id, classpath: run.classpath, error: describeThrown(error).error },
          `trigger ${run.id} (${run.classpath}) onKill failed`,
        );
      }
    }
    try {
      await run.trigger.cleanup();
    } catch (error) {
      this.log.warn(
        { trigger_id: run.id, classpath: run.classpath, error: describeThrown(error).error },
        `trigger ${run.id} (${run.classpath}) cleanup failed`,
      );
    }
  }
}

/** A watcher's yield checked and made ready to write: WatchEvents with keys and JSON payloads, and a JSON cursor. */
function watchBatchOf(run: TriggerRun, value: unknown): WatchBatch {
  if (value === null || typeof value !== 'object' || !('events' in value) || !('cursor' in value) || !Array.isArray(value.events))
    throw new TriggerFailedError(`the watcher yielded ${describe(value)} instead of WatchEvents (events with keys, and the cursor after them)`);
  const events = value.events.map((event: unknown, index: number) => {
    const key = (event as { key?: unknown } | null)?.key;
    if (typeof key !== 'string' || key === '' || key.length > WATCH_KEY_MAX)
      throw new TriggerFailedError(
        `the watcher's event ${index} has key ${JSON.stringify(key) ?? describe(key)}; give each event a key of 1 to ${WATCH_KEY_MAX} characters, unique in its source (a message id)`,
      );
    return { key, payloadJson: toJsonText((event as { payload: JsonValue }).payload, `events[${index}].payload`) };
  });
  return { triggerId: run.id, classpath: run.classpath, events, cursorJson: toJsonText(value.cursor as JsonValue, 'cursor') };
}

/** Removes `item` from `list` (kept small: a trigger's reads in flight). */
function removeFrom<T>(list: T[] | undefined, item: T): void {
  const index = list?.indexOf(item) ?? -1;
  if (index >= 0) list!.splice(index, 1);
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'object') return `an object (${(value as object).constructor?.name ?? 'Object'})`;
  return `a ${typeof value}`;
}

/** The values of the kwargs the trigger's class declares secret (BaseTrigger.secretKwargs). */
function secretsOf(trigger: BaseTrigger): string[] {
  const names = (trigger.constructor as { secretKwargs?: readonly string[] }).secretKwargs;
  return names && names.length > 0 ? secretKwargValues(names, trigger.serialize().kwargs) : [];
}
