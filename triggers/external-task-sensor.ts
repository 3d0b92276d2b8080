import { DateTime, Duration } from 'luxon';
import { BaseSensorOperator, type SensorOptions } from '../src/authoring/sensors/base-sensor.ts';
import { InvalidSensorError } from '../src/vocabulary/errors.ts';
import { PokeReturnValue } from '../src/authoring/sensors/poke-result.ts';
import { TaskFailedWithoutRetry } from '../src/authoring/operators/task-signals.ts';
import type { DurationInput } from '../src/vocabulary/time/duration.ts';
import type { JsonValue } from '../src/vocabulary/serialization/json.ts';
import type { PokeContext } from '../src/authoring/sensors/sensor-class.ts';
import type { RuntimeContext } from '../src/authoring/operators/base-operator.ts';
import { describeValue } from './date-time-trigger.ts';
import { checkSensorOptions } from './sensor-option-error.ts';
import {
  judgeTaskStates,
  resolveTaskStateCheck,
  TaskStateTrigger,
  type ResolvedTaskStateCheck,
  type TaskStateEvent,
  type TaskStateVerdict,
} from './task-state-trigger.ts';

/**
 * Maps the sensor's run's logical date to the logical date(s) of the runs it watches (Airflow's
 * execution_date_fn). Registered by name, so a DAG names it as text.
 */
export type LogicalDateFn = (logicalDate: DateTime, context: RuntimeContext) => DateMoment | readonly DateMoment[];
type DateMoment = DateTime | Date | string;

export interface ExternalTaskSensorOptions extends SensorOptions {
  /** The DAG whose run is watched. */
  readonly externalDagId: string;
  /** One task of it to watch. Give this, or externalTaskIds, or neither (the whole DAG run). */
  readonly externalTaskId?: string;
  /** Tasks of it to watch: every one must reach an allowed state. */
  readonly externalTaskIds?: readonly string[];
  /** The states that count as done. @default ['success'] */
  readonly allowedStates?: readonly string[];
  /**
   * The states that fail the sensor at once (no retry; skipped with softFail) instead of waiting
   * for its timeout. @default ['failed', 'upstream_failed'] for tasks, ['failed'] for a run
   */
  readonly failedStates?: readonly string[];
  /** The states that end the sensor skipped. @default [] */
  readonly skippedStates?: readonly string[];
  /**
   * The watched run's logical date is this run's minus this (Airflow's execution_delta; a luxon
   * Duration or seconds, negative for a later run), e.g. `Duration.fromObject({ hours: 1 })` for
   * an hourly DAG watching the previous hour. Default: the same logical date.
   */
  readonly logicalDateDelta?: DurationInput;
  /** The name of a function registered with ExternalTaskSensor.registerLogicalDateFn (Airflow's execution_date_fn). */
  readonly logicalDateFn?: string;
}

const logicalDateFns = new Map<string, LogicalDateFn>();

/**
 * Waits until a task of another DAG (or several, or its whole DAG run) reaches an allowed state
 * for a matching logical date: the same as this run's, shifted by `logicalDateDelta`, or
 * computed by a named `logicalDateFn` (Airflow's ExternalTaskSensor). A failed state ends it at
 * once (DF_EXTERNAL_TASK_FAILED; skipped with softFail). Its return value is what it saw:
 * `{ outcome, reason, dagId, logicalDates, states }`.
 *
 * Poke and reschedule modes read deferflow's database from the worker; deferrable mode waits on a
 * TaskStateTrigger, which reads it from the triggerer. Either way the reads of every sensor in the
 * process are batched into at most one query a second, and sensors watching the same runs the same
 * way share one trigger row.
 */
export class ExternalTaskSensor extends BaseSensorOperator {
  static readonly classpath = 'deferflow.sensors.ExternalTaskSensor';

  /**
   * Registers `fn` under `name`, for sensors' `logicalDateFn: name`. Call it in the DAG file (or a
   * module it imports) before making the sensors that name it.
   */
  static registerLogicalDateFn(name: string, fn: LogicalDateFn): void {
    if (typeof name !== 'string' || name === '')
      throw new InvalidSensorError('ExternalTaskSensor', `registerLogicalDateFn: ${describeValue(name)} is not a name`);
    if (typeof fn !== 'function')
      throw new InvalidSensorError('ExternalTaskSensor', `registerLogicalDateFn(${JSON.stringify(name)}): ${describeValue(fn)} is not a function`);
    logicalDateFns.set(name, fn);
  }

  readonly externalDagId: string;
  readonly externalTaskIds: readonly string[] | null;
  readonly logicalDateDeltaMs: number;
  readonly logicalDateFn: string | null;
  /** Everything but the logical dates, which come from each run. */
  readonly #check: Omit<ResolvedTaskStateCheck, 'logicalDates'>;

  constructor({
    externalDagId,
    externalTaskId,
    externalTaskIds,
    allowedStates,
    failedStates,
    skippedStates,
    logicalDateDelta,
    logicalDateFn,
    ...options
  }: ExternalTaskSensorOptions) {
    super(options);
    const invalid = (why: string) => new InvalidSensorError('ExternalTaskSensor', why);
    if (externalTaskId !== undefined && externalTaskIds !== undefined) throw invalid('give externalTaskId or externalTaskIds, not both');
    if (externalTaskId !== undefined && (typeof externalTaskId !== 'string' || externalTaskId === ''))
      throw invalid(`externalTaskId ${describeValue(externalTaskId)} is not a task id`);
    const taskIds = externalTaskId !== undefined ? [externalTaskId] : (externalTaskIds ?? null);
    const { logicalDates: _placeholder, ...check } = checkSensorOptions('ExternalTaskSensor', () =>
      resolveTaskStateCheck(
        {
          dagId: externalDagId,
          taskIds: taskIds as readonly string[] | null,
          logicalDates: ['1970-01-01T00:00:00Z'],
          ...(allowedStates === undefined ? {} : { allowedStates }),
          ...(failedStates === undefined ? {} : { failedStates }),
          ...(skippedStates === undefined ? {} : { skippedStates }),
        },
        'ExternalTaskSensor',
      ),
    );
    this.#check = check;
    this.externalDagId = check.dagId;
    this.externalTaskIds = check.taskIds;
    if (logicalDateDelta !== undefined && logicalDateFn !== undefined) throw invalid('give logicalDateDelta or logicalDateFn, not both');
    this.logicalDateDeltaMs = 0;
    if (logicalDateDelta !== undefined) {
      const ms = Duration.isDuration(logicalDateDelta)
        ? logicalDateDelta.isValid
          ? logicalDateDelta.toMillis()
          : Number.NaN
        : Number(logicalDateDelta) * 1000;
      if ((typeof logicalDateDelta !== 'number' && !Duration.isDuration(logicalDateDelta)) || !Number.isFinite(ms))
        throw invalid(`logicalDateDelta ${describeValue(logicalDateDelta)} is not a luxon Duration or a number of seconds`);
      this.logicalDateDeltaMs = ms;
    }
    this.logicalDateFn = logicalDateFn ?? null;
    if (logicalDateFn !== undefined && !logicalDateFns.has(logicalDateFn)) {
      const known = [...logicalDateFns.keys()];
      throw invalid(
        `logicalDateFn ${describeValue(logicalDateFn)} is not registered (registered: ${known.length === 0 ? 'none' : known.join(', ')}); ` +
          'call ExternalTaskSensor.registerLogicalDateFn(name, fn) before making the sensor',
      );
    }
  }

  /** The logical dates of the runs this task instance watches, canonical UTC ISO. */
  logicalDates(context: RuntimeContext): string[] {
    const own = DateTime.fromISO(context.dagRun.logicalDate, { zone: 'utc' });
    if (this.logicalDateFn === null) return [own.minus(this.logicalDateDeltaMs).toISO()!];
    const fn = logicalDateFns.get(this.logicalDateFn);
    if (!fn) throw new InvalidSensorError('ExternalTaskSensor', `logicalDateFn ${JSON.stringify(this.logicalDateFn)} is not registered in this process`);
    const given = fn(own, context);
    const list = (Array.isArray(given) ? given : [given]) as DateMoment[];
    if (list.length === 0) throw new InvalidSensorError('ExternalTaskSensor', `logicalDateFn ${JSON.stringify(this.logicalDateFn)} returned no date`);
    return list.map((moment) => {
      const parsed =
        moment instanceof Date
          ? DateTime.fromJSDate(moment)
          : DateTime.isDateTime(moment)
            ? moment
            : DateTime.fromISO(String(moment), { setZone: true, zone: 'utc' });
      if (!parsed.isValid) {
        throw new InvalidSensorError(
          'ExternalTaskSensor',
          `logicalDateFn ${JSON.stringify(this.logicalDateFn)} returned ${describeValue(moment)}, which is not a moment`,
        );
      }
      return parsed.toUTC().toISO()!;
    });
  }

  async poke(context: PokeContext & RuntimeContext): Promise<boolean | PokeReturnValue> {
    const check = { ...this.#check, logicalDates: this.logicalDates(context) };
    const runs = await Promise.all(check.logicalDates.map((logicalDate) => context.dagRunStates({ dagId: check.dagId, logicalDate, taskIds: check.taskIds })));
    const verdict = judgeTaskStates(check, runs);
    if (verdict.outcome === 'waiting') return false;
    return new PokeReturnValue(true, this.#ended(eventOf(check, verdict)));
  }

  override trigger(context: RuntimeContext): TaskStateTrigger {
    return new TaskStateTrigger({ ...this.#check, logicalDates: this.logicalDates(context), pollInterval: this.pokeIntervalMs / 1000 });
  }

  override sensorDone(_context: unknown, event: JsonValue): JsonValue | undefined {
    return this.#ended(event as unknown as TaskStateEvent);
  }

  /** Success: the event, as the return value; failed or skipped: the task ends so. */
  #ended(event: TaskStateEvent): JsonValue {
    if (event.outcome === 'failed') {
      if (this.softFail) this.skip(`${event.reason}; softFail: skipped`);
      throw new TaskFailedWithoutRetry(event.reason, 'DF_EXTERNAL_TASK_FAILED');
    }
    if (event.outcome === 'skipped') this.skip(event.reason);
    return event as unknown as JsonValue;
  }
}

function eventOf(check: ResolvedTaskStateCheck, verdict: Exclude<TaskStateVerdict, { outcome: 'waiting' }>): TaskStateEvent {
  return { outcome: verdict.outcome, reason: verdict.reason, dagId: check.dagId, logicalDates: [...check.logicalDates], states: verdict.states };
}
