import { TriggerRuntimeError } from '../../vocabulary/errors.ts';
import type { Logger } from 'pino';
import { canonicalJson, sha256Hex, type JsonObject, type JsonValue } from '../../vocabulary/serialization/json.ts';
import { sleepUntil as standaloneSleepUntil } from './standalone-sleep.ts';
import type { TriggerEvent, WatchEvents } from './trigger-event.ts';
import type { SensorClass } from '../sensors/sensor-class.ts';
import type { DagRunStates, DagRunStatesQuery } from '../../model/dag-run-states.ts';
import type { Signal } from '../../model/signal.ts';
import { UpstreamHub, type UpstreamFilter, type UpstreamSource, type UpstreamSubscription } from './upstream-hub.ts';

/** A trigger as stored: its classpath and constructor kwargs (JSON), from which any triggerer rebuilds it. */
export interface SerializedTrigger {
  /** The name the triggerer's registry knows the class by. */
  readonly classpath: string;
  /** JSON kwargs that rebuild an equal trigger through `new Class(kwargs)`. */
  readonly kwargs: JsonObject;
}

/** A trigger as a DAG's watcher is stored (`schedule: { watch }`): its row's classpath and kwargs, and the events the DAG takes. */
export interface SerializedWatcher extends SerializedTrigger {
  /**
   * A subset match (as SignalTrigger's `match`) on each event's payload: only the events it
   * matches make runs of the DAG; absent, every event does. Left out of the row's kwargs, so that
   * the watchers of DAGs that differ only in it are one row and one reader (see MqttTrigger's and
   * RabbitMqTrigger's `shared`), each DAG taking its own events from the batch it writes.
   */
  readonly eventFilter?: JsonValue;
}

/**
 * What the triggerer lends a running trigger. Created once per trigger by the runner; the
 * trigger reaches it through its protected helpers.
 */
export interface TriggerRuntime {
  readonly signal: AbortSignal;
  /** Resolves at `epochMs`, or rejects with an AbortError when the trigger is cancelled. */
  sleepUntil(epochMs: number): Promise<void>;
  /** The trigger's child logger (trigger id, classpath), created on first use. */
  logger(): Logger;
  /** A sensor class this triggerer allows (consolidated sensor pokes); throws DF_UNKNOWN_SENSOR for any other. */
  sensorClass(classpath: string): SensorClass;
  /** A DAG run's states from deferflow's database, read-only and batched with every other trigger's reads. */
  dagRunStates(query: DagRunStatesQuery): Promise<DagRunStates | null>;
  /** The first signal on `key` after `afterVersion` that `accept` takes (default: any). */
  nextSignal(key: string, afterVersion: number, accept?: (signal: Signal) => boolean): Promise<Signal>;
  /** Joins the triggerer's one reader of `source` (see BaseTrigger.readUpstream). */
  upstream<B extends JsonValue>(source: UpstreamSource<B>, filter: UpstreamFilter<B>): UpstreamSubscription<B>;
  /** Whether it runs as a watcher (a DAG is scheduled on it): it yields WatchEvents, and runs on. */
  readonly watching: boolean;
  /** A watcher's cursor as last written (null before its first events, and for a wait). */
  readonly cursor: JsonValue | null;
}

const TRIGGER_BRAND = Symbol.for('deferflow.BaseTrigger');
/** Shared upstreams of triggers run outside a triggerer (a test calling run() itself). */
let standaloneHub: UpstreamHub | undefined;
const NEVER_ABORTED = new AbortController().signal;
// Registered globally (Symbol.for), as the brand is: a trigger module may carry its own copy of
// deferflow (another install, or the same file loaded twice through require and import), and
// its triggers must still reach the runtime the triggerer attaches.
const RUNTIME = Symbol.for('deferflow.triggerRuntime');

/**
 * A trigger waits for one thing on the triggerer's event loop and yields a TriggerEvent when
 * it happens. Subclasses implement:
 * - `constructor(kwargs)`: validate and keep what run() needs; throw on bad input.
 * - `serialize()`: the classpath and JSON kwargs that rebuild it on the triggerer.
 * - `async *run(signal)`: wait (prefer `this.sleep` / `this.sleepUntil`, which cost no timer
 *   per trigger) and yield events; the first event completes the wait. `signal` aborts when the
 *   trigger is cancelled; pass it to fetch() and the like. Declare `run()` without the parameter
 *   when you do not need it: the triggerer then makes no AbortSignal for the trigger (a few
 *   hundred bytes each, at 100,000 triggers), and `this.signal` still makes one on demand.
 * - `cleanup()` (optional): release what run() opened; it runs whenever the trigger stops
 *   (fired, failed, cancelled, moved to another triggerer).
 * - `onKill()` (optional): the wait was abandoned for good (its task instances were cleared or
 *   finished otherwise, so its row is gone): stop what it started outside this process, e.g.
 *   cancel a remote job. It runs before cleanup(), and not when the trigger merely moves to
 *   another triggerer, which runs it on.
 *
 * The triggerer finds a class by its classpath: a subclass's own `static classpath`, else its
 * class name.
 */
export abstract class BaseTrigger {
  /** A brand: lets the is…() checks recognise it whichever copy of deferflow made it. */
  static readonly [TRIGGER_BRAND] = true;

  /**
   * Names of kwargs fields that hold secrets (a token, a password): their values are masked
   * (`***`) in the trigger's log lines and in the error of a failure, wherever those are printed
   * or stored. Connection passwords (DEFERFLOW_CONN_*) are masked without being named here.
   */
  static readonly secretKwargs?: readonly string[];

  /** What the triggerer attached to run it (none outside a triggerer). */
  [RUNTIME]: TriggerRuntime | undefined;

  /** The trigger as stored: its classpath and constructor kwargs (JSON), from which any triggerer rebuilds it. */
  abstract serialize(): SerializedTrigger;

  /**
   * How the trigger is stored in a serialized DAG when it starts a task (`startTrigger`): by
   * default as serialize() gives it. A trigger whose kwargs depend on when the task starts (a
   * delay) writes a placeholder the scheduler renders at that moment (see
   * start-trigger-kwargs.ts), since the DAG is serialized long before.
   */
  serializeAsStartTrigger(): SerializedTrigger {
    return this.serialize();
  }

  /**
   * How the trigger is stored as a watcher a DAG is scheduled on (`schedule: { watch }`): by
   * default as serialize() gives it. Kwargs that only a wait needs and that differ each time the
   * trigger is made (a wait's starting point) are left out, so that the DAG's watcher stays one
   * row from one DAG processing to the next.
   */
  serializeAsWatcher(): SerializedWatcher {
    return this.serialize();
  }

  /**
   * The broker-side consumer this trigger reads through as a watcher (a queue, a consumer group, a
   * durable consumer, a session), named so that equal names are one consumer; undefined (the
   * default) when it reads through nothing of the kind (a cursor of its own). Two watcher rows
   * naming one consumer would each take messages the other never sees, so DAG processing refuses
   * a DAG whose watcher names a consumer another DAG's different watcher reads.
   */
  watcherConsumer(): string | undefined {
    return undefined;
  }

  /**
   * Waits for what the trigger is about and yields a TriggerEvent when it happens (the first ends
   * the wait); running as a watcher (`this.watching`), yields WatchEvents for as long as it runs.
   * Declare `signal` only when you use it: the triggerer then makes an AbortSignal for the trigger.
   */
  abstract run(signal: AbortSignal): AsyncGenerator<TriggerEvent | WatchEvents, void, void>;

  /**
   * True when it runs as a watcher: a DAG is scheduled on it (`schedule: { watch: [...] }`), so it
   * yields WatchEvents, each batch's runs written before the yield returns, and never ends.
   * False for a wait (a task's defer), which yields one TriggerEvent.
   */
  protected get watching(): boolean {
    return this[RUNTIME]?.watching ?? false;
  }

  /** A watcher's position as last written with its runs (null before its first events): where to read its source from. */
  protected get cursor(): JsonValue | null {
    return this[RUNTIME]?.cursor ?? null;
  }

  /**
   * Aborted when the trigger is cancelled (the same signal run(signal) receives), made on first
   * use. Outside a triggerer it never aborts.
   */
  protected get signal(): AbortSignal {
    return this[RUNTIME]?.signal ?? NEVER_ABORTED;
  }

  /** Runs once when the trigger stops, however it stops (fired, failed, cancelled, handed over): close what run() opened. */
  async cleanup(): Promise<void> {}

  /** Runs when the trigger is stopped because its task instances no longer wait on it (cleared, timed out), before cleanup(). */
  async onKill(): Promise<void> {}

  /** Sleeps `ms` milliseconds; see sleepUntil. */
  protected sleep(ms: number): Promise<void> {
    return this.sleepUntil(Date.now() + ms);
  }

  /**
   * Sleeps until the wall-clock moment `epochMs` (never wakes early, works past Node's 24.8-day
   * timer limit). On a triggerer this joins one shared timer queue; cancelling the trigger
   * rejects it with an AbortError.
   */
  protected sleepUntil(epochMs: number): Promise<void> {
    const runtime = this[RUNTIME];
    return runtime ? runtime.sleepUntil(epochMs) : standaloneSleepUntil(epochMs);
  }

  /**
   * A sensor class the triggerer allows, by classpath (a consolidated sensor wait pokes with it);
   * DF_UNKNOWN_SENSOR for a class not on its allow-list.
   */
  protected allowedSensorClass(classpath: string): SensorClass {
    const runtime = this[RUNTIME];
    if (!runtime) throw new TriggerRuntimeError('sensor classes are available while the trigger runs on a triggerer');
    return runtime.sensorClass(classpath);
  }

  /**
   * The states of a DAG run of deferflow's own database (by DAG and logical date) and of the task
   * instances of `taskIds` in it; null while the run does not exist. Read-only, and cheap to call
   * from many triggers: the triggerer gathers the reads of all its triggers into one query a
   * second. Cancelling the trigger rejects a read in flight with an AbortError.
   */
  protected dagRunStates(query: DagRunStatesQuery): Promise<DagRunStates | null> {
    const runtime = this[RUNTIME];
    if (!runtime)
      return Promise.reject(
        new TriggerRuntimeError("this.dagRunStates() reads the triggerer's database: it is available while the trigger runs on a triggerer"),
      );
    return runtime.dagRunStates(query);
  }

  /**
   * The first signal on `key` newer than `afterVersion` that `accept` takes (default: any): one
   * already sent, or the next to come. The triggerer's signal service listens for every trigger
   * at once (one query a round; pushed at once on PostgreSQL). Cancelling the trigger rejects it
   * with an AbortError and stops listening.
   */
  protected nextSignal(key: string, afterVersion: number, accept?: (signal: Signal) => boolean): Promise<Signal> {
    const runtime = this[RUNTIME];
    if (!runtime)
      return Promise.reject(new TriggerRuntimeError('this.nextSignal() listens through the triggerer: it is available while the trigger runs on a triggerer'));
    return runtime.nextSignal(key, afterVersion, accept);
  }

  /**
   * Reads `source` through the triggerer's one reader of its key, shared with every trigger on this
   * triggerer that reads the same stream, taking the messages `filter` accepts (after
   * `filter.since`), in stream order. 5,000 tasks waiting for their own message on one stream then
   * cost one reader, not 5,000 connections. Cancelling the trigger rejects a `next()` in flight with
   * an AbortError and leaves the upstream.
   */
  protected readUpstream<B extends JsonValue>(source: UpstreamSource<B>, filter: UpstreamFilter<B>): UpstreamSubscription<B> {
    const runtime = this[RUNTIME];
    if (runtime) return runtime.upstream(source, filter);
    standaloneHub ??= new UpstreamHub();
    return standaloneHub.subscribe(source, filter);
  }

  /**
   * What the blocked-loop warning and other logs add to the classpath to say which wait this is
   * (a consolidated sensor names its sensor class and poke context); empty by default.
   */
  describeWait(): string {
    return '';
  }

  /** A logger bound to this trigger's id and classpath. */
  protected get log(): Logger {
    const runtime = this[RUNTIME];
    if (!runtime) throw new TriggerRuntimeError('this.log is available while the trigger runs on a triggerer');
    return runtime.logger();
  }
}

/**
 * A trigger class, as a triggerer is allowed to run it: constructed from the kwargs its row
 * stores (JSON). Its constructor may type its kwargs as it likes (`{ from: number }`): it is the
 * one that checks them (InvalidTriggerArgumentError), so any constructor argument type is taken.
 */
export type TriggerClass = (new (kwargs: never) => BaseTrigger) & { readonly classpath?: string };

/** Builds a trigger from its stored kwargs: its constructor checks them. */
export function constructTrigger(cls: TriggerClass, kwargs: JsonObject): BaseTrigger {
  return new (cls as unknown as new (kwargs: JsonObject) => BaseTrigger)(kwargs);
}

export function isTriggerClass(value: unknown): value is TriggerClass {
  return typeof value === 'function' && (value as unknown as Record<symbol, unknown>)[TRIGGER_BRAND] === true;
}

export function classpathOf(cls: TriggerClass): string {
  return Object.hasOwn(cls, 'classpath') && typeof cls.classpath === 'string' ? cls.classpath : cls.name;
}

/** Lends `runtime` to `trigger` (the runner's side of the protected helpers). */
export function attachRuntime(trigger: BaseTrigger, runtime: TriggerRuntime): void {
  trigger[RUNTIME] = runtime;
}

/** sha256 of the canonical {classpath, kwargs}: identical waits share one trigger row. */
export function triggerHash(serialized: SerializedTrigger): string {
  return sha256Hex(canonicalJson({ classpath: serialized.classpath, kwargs: serialized.kwargs }));
}
