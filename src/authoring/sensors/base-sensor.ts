import { Duration } from 'luxon';
import { InvalidSensorError } from '../../vocabulary/errors.ts';
import { TRIGGER_FAILURE_METHOD, type FailureKwargs } from '../../model/failure-marker.ts';
import { BaseOperator, type RuntimeContext, type TaskOptions } from '../operators/base-operator.ts';
import { isTaskFailedWithoutRetry, isTaskRescheduled, isTaskSkipped, TaskFailedWithoutRetry } from '../operators/task-signals.ts';
import { isTaskDeferred } from '../operators/task-deferred.ts';
import type { JsonObject, JsonValue } from '../../vocabulary/serialization/json.ts';
import { durationToMs, type DurationInput } from '../../vocabulary/time/duration.ts';
import type { BaseTrigger } from '../triggers/base-trigger.ts';
import { backoffPause, pokeResult, type PokeResult, type PokeReturnValue } from './poke-result.ts';
import { SENSOR_BRAND, sensorClasspathOf, type PokeContext, type SensorClass } from './sensor-class.ts';
import { SensorPokeTrigger } from './sensor-poke-trigger.ts';

/** How a sensor waits: holding its slot (poke), giving it back between pokes (reschedule), or on the triggerer (deferrable). */
export type SensorMode = 'poke' | 'reschedule' | 'deferrable';
/** The modes a sensor can wait in. */
export const SENSOR_MODES: readonly SensorMode[] = ['poke', 'reschedule', 'deferrable'];

/** A sensor's options: the task's, its mode, poke interval, timeout, exponential backoff and soft fail. */
export interface SensorOptions extends TaskOptions {
  /** Pause between pokes (luxon Duration or seconds). @default 60 seconds */
  readonly pokeInterval?: DurationInput;
  /**
   * Longest the task waits, counted from its first poke, across every reschedule and deferral
   * (a retry starts a new count). Past it the task fails without a retry (DF_SENSOR_TIMEOUT),
   * or is skipped with softFail. @default 7 days
   */
  readonly timeout?: DurationInput;
  /**
   * - `poke`: holds its worker slot and sleeps between pokes;
   * - `reschedule`: gives the slot back between pokes (up_for_reschedule until the next one);
   * - `deferrable`: waits on the triggerer, no slot held: on the sensor's own trigger, or one
   *   consolidated poke shared by every sensor waiting on the same thing.
   * @default 'poke'
   */
  readonly mode?: SensorMode;
  /** A timeout or a failed poke ends the task skipped instead of failed. @default false */
  readonly softFail?: boolean;
  /** A poke that throws counts as "not yet" (logged) instead of failing the try. @default false */
  readonly silentFail?: boolean;
  /**
   * Double the pause after each poke that finds nothing, in every mode (deferrable: the
   * consolidated poke backs off on the triggerer; a sensor's own trigger polls as it does).
   * @default false
   */
  readonly exponentialBackoff?: boolean;
  /** With exponentialBackoff, the longest pause. @default none */
  readonly maxWait?: DurationInput | null;
}

/** What the worker is told by the deployment: which sensor classes to run consolidated (`--smart-sensors`). */
export type SmartSensors = 'all' | readonly string[];

/** The method a deferred sensor resumes at when its wait fires. */
const RESUME_METHOD = 'sensorDone';
const DEFAULT_POKE_INTERVAL_S = 60;
const DEFAULT_TIMEOUT_S = 7 * 24 * 3600;

/**
 * A task that waits until a condition holds (Airflow's BaseSensorOperator): `poke(context)`
 * answers whether it holds now (true/false, or a PokeReturnValue whose value becomes the task's
 * return value). How it waits between pokes is its `mode`; see SensorOptions.
 *
 * A sensor class may declare `static pokeContextFields`: the options that define what it waits
 * for (each both a constructor option and a property of the same name, JSON values). Such a
 * sensor can wait consolidated: in deferrable mode (or switched by the deployment's
 * `--smart-sensors`), its poke runs on the triggerer, once per interval for every task instance
 * waiting on the same context. The triggerer makes it with `new Sensor({ taskId, ...context })`,
 * so poke() must use only those fields and the PokeContext it is given (a logger, a signal).
 * A sensor with a trigger of its own overrides `trigger(context)` instead.
 */
export abstract class BaseSensorOperator<Context extends RuntimeContext = RuntimeContext> extends BaseOperator<Context> {
  /** A brand: lets the is…() checks recognise it whichever copy of deferflow made it. */
  static readonly [SENSOR_BRAND] = true;
  /** The options that define what this sensor waits for (AIP-17's poke_context_fields); none by default. */
  static readonly pokeContextFields?: readonly string[];

  /** Pause between pokes, in ms (the first, with exponentialBackoff). */
  readonly pokeIntervalMs: number;
  /** How long the sensor may wait in all, in ms, before it fails (or skips, with softFail). */
  readonly timeoutMs: number;
  /** How it waits: poke, reschedule or deferrable. */
  readonly mode: SensorMode;
  /** A timeout skips the task instead of failing it. */
  readonly softFail: boolean;
  /** An error in poke() skips the task instead of failing it. */
  readonly silentFail: boolean;
  /** Each pause doubles (with jitter), up to maxWaitMs. */
  readonly exponentialBackoff: boolean;
  /** The longest pause with exponentialBackoff, in ms; null: no cap. */
  readonly maxWaitMs: number | null;

  constructor(options: SensorOptions) {
    super(options);
    const name = this.constructor.name;
    const ms = (value: DurationInput, field: string) => {
      try {
        return durationToMs(value, field);
      } catch (error) {
        throw new InvalidSensorError(name, (error as Error).message);
      }
    };
    this.pokeIntervalMs = ms(options.pokeInterval ?? DEFAULT_POKE_INTERVAL_S, 'pokeInterval');
    if (this.pokeIntervalMs <= 0) throw new InvalidSensorError(name, 'pokeInterval: must be above 0');
    this.timeoutMs = ms(options.timeout ?? DEFAULT_TIMEOUT_S, 'timeout');
    this.mode = options.mode ?? 'poke';
    if (!SENSOR_MODES.includes(this.mode))
      throw new InvalidSensorError(name, `mode: expected one of ${SENSOR_MODES.join(', ')}, got ${JSON.stringify(options.mode)}`);
    this.softFail = options.softFail ?? false;
    this.silentFail = options.silentFail ?? false;
    this.exponentialBackoff = options.exponentialBackoff ?? false;
    this.maxWaitMs = options.maxWait === undefined || options.maxWait === null ? null : ms(options.maxWait, 'maxWait');
    if (this.mode === 'deferrable' && !this.#canDefer()) {
      throw new InvalidSensorError(
        name,
        'mode deferrable needs a trigger of its own (override trigger()) or static pokeContextFields (for the consolidated poke); use mode poke or reschedule',
      );
    }
  }

  /** Whether it has something to defer onto: a trigger of its own, or a poke context to consolidate. */
  #canDefer(): boolean {
    const cls = this.constructor as SensorClass;
    return (cls.pokeContextFields ?? []).length > 0 || this.trigger !== BaseSensorOperator.prototype.trigger;
  }

  /** Whether the condition holds now. */
  abstract poke(context: PokeContext): boolean | PokeReturnValue | Promise<boolean | PokeReturnValue>;

  /** A trigger of its own to wait on in deferrable mode; null (the default): the consolidated poke. */
  trigger(_context: Context): BaseTrigger | null {
    return null;
  }

  /** The values of the class's pokeContextFields: what this sensor waits for. */
  pokeContext(): JsonObject {
    const fields = (this.constructor as SensorClass).pokeContextFields ?? [];
    return Object.fromEntries(fields.map((field) => [field, (this as unknown as Record<string, JsonValue>)[field] ?? null]));
  }

  /** Pokes until the condition holds or the timeout passes, as its mode says: holding the slot, rescheduled between pokes, or deferred to the triggerer. */
  async execute(context: Context): Promise<JsonValue | undefined> {
    const mode = this.#effectiveMode(context);
    const reschedules = mode === 'reschedule' ? await context.taskReschedules() : [];
    const firstPokeAt = reschedules[0]?.startDate ?? Date.now();
    const deadline = firstPokeAt + this.timeoutMs;
    let pokes = reschedules.length;
    for (;;) {
      const { done, value } = await this.#pokeOnce(context);
      pokes++;
      if (done) return value;
      const now = Date.now();
      if (now >= deadline) return this.#timedOut(firstPokeAt, now);
      const pause = Math.min(this.nextPokeIn(this.#pauseAfter(pokes), context), deadline - now);
      if (mode === 'reschedule') return this.reschedule(new Date(now + pause));
      if (mode === 'deferrable') {
        return this.defer({
          trigger: this.trigger(context) ?? this.#consolidatedTrigger(),
          method: RESUME_METHOD,
          kwargs: { firstPokeAt },
          timeout: Duration.fromMillis(deadline - now),
        });
      }
      await sleepUnlessAborted(pause, context.signal);
    }
  }

  /**
   * How long to wait before the next poke (poke and reschedule modes), given the pause the
   * options ask for: a sensor that knows when its condition will hold (a moment) pokes then.
   */
  protected nextPokeIn(pauseMs: number, _context: Context): number {
    return pauseMs;
  }

  /** Where a deferred sensor resumes once its wait fired: the consolidated poke's value, if any. */
  sensorDone(_context: Context, event: JsonValue): JsonValue | undefined {
    if (event !== null && typeof event === 'object' && !Array.isArray(event) && 'xcomValue' in event) return event.xcomValue ?? undefined;
    return undefined;
  }

  /** Resumes after a deferral: the poke trigger's event ends the wait, or its timeout fails (or skips, with softFail) the task. */
  override resumeExecution(context: Context, nextMethod: string, nextKwargs: JsonObject): unknown {
    if (nextMethod === TRIGGER_FAILURE_METHOD) {
      const failure = nextKwargs as unknown as FailureKwargs;
      if (failure.reason === 'timeout') {
        const firstPokeAt = typeof nextKwargs.firstPokeAt === 'number' ? nextKwargs.firstPokeAt : Date.now() - this.timeoutMs;
        return this.#timedOut(firstPokeAt, Date.now());
      }
      if (this.softFail) this.skip(`the sensor's wait failed [${failure.code ?? 'DF_TRIGGER_FAILED'}]: ${failure.error}; softFail: skipped`);
    }
    return super.resumeExecution(context, nextMethod, nextKwargs);
  }

  #effectiveMode(context: Context): SensorMode {
    if (this.mode === 'deferrable') return this.mode;
    const cls = this.constructor as SensorClass;
    const smart = context.smartSensors;
    const switched = smart !== undefined && (smart === 'all' || smart.includes(sensorClasspathOf(cls)) || smart.includes(cls.name));
    // The deployment asks for consolidation; a sensor that cannot defer keeps its mode.
    return switched && this.#canDefer() ? 'deferrable' : this.mode;
  }

  #consolidatedTrigger(): SensorPokeTrigger {
    return new SensorPokeTrigger({
      sensor: sensorClasspathOf(this.constructor as SensorClass),
      pokeContext: this.pokeContext(),
      pokeInterval: this.pokeIntervalMs / 1000,
      silentFail: this.silentFail,
      ...(this.exponentialBackoff ? { exponentialBackoff: true } : {}),
      ...(this.exponentialBackoff && this.maxWaitMs !== null ? { maxWait: this.maxWaitMs / 1000 } : {}),
    });
  }

  async #pokeOnce(context: Context): Promise<PokeResult> {
    try {
      return pokeResult(await this.poke(context), this.constructor.name);
    } catch (error) {
      if (isTaskSkipped(error) || isTaskRescheduled(error) || isTaskDeferred(error) || isTaskFailedWithoutRetry(error)) throw error;
      const message = error instanceof Error ? error.message : String(error);
      if (this.silentFail) {
        context.log.warn({ error: message }, `poke failed: ${message}; silentFail: it counts as not yet`);
        return { done: false, value: undefined };
      }
      if (this.softFail) this.skip(`poke failed: ${message}; softFail: skipped`);
      throw error;
    }
  }

  /** The pause after the `pokes`-th poke of the try found nothing. */
  #pauseAfter(pokes: number): number {
    return this.exponentialBackoff ? backoffPause(this.pokeIntervalMs, pokes, this.maxWaitMs) : this.pokeIntervalMs;
  }

  #timedOut(firstPokeAt: number, now: number): never {
    const message = `sensor timed out: waited ${Math.round((now - firstPokeAt) / 1000)} s since its first poke (timeout ${this.timeoutMs / 1000} s)`;
    if (this.softFail) this.skip(`${message}; softFail: skipped`);
    throw new TaskFailedWithoutRetry(message, 'DF_SENSOR_TIMEOUT');
  }
}

/** Resolves after `ms`, or at once when `signal` aborts (the caller then finds it aborted and stops). */
function sleepUnlessAborted(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) throw signal.reason;
  return new Promise<void>((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
