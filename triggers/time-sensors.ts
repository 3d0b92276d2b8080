import { DateTime, Duration } from 'luxon';
import { BaseSensorOperator, type SensorOptions } from '../src/authoring/sensors/base-sensor.ts';
import { InvalidSensorError, InvalidTriggerArgumentError } from '../src/vocabulary/errors.ts';
import type { DurationInput } from '../src/vocabulary/time/duration.ts';
import type { RuntimeContext } from '../src/authoring/operators/base-operator.ts';
import { DateTimeTrigger, type MomentInput } from './date-time-trigger.ts';

/** A DAG run's dates, as a DateTimeSensor's function of the run receives them (UTC). */
export interface RunDates {
  readonly logicalDate: DateTime;
  /** Null for a run without a data interval (a manual run). */
  readonly dataIntervalStart: DateTime | null;
  readonly dataIntervalEnd: DateTime | null;
}

function runDates(context: RuntimeContext): RunDates {
  const at = (iso: string | null) => (iso === null ? null : DateTime.fromISO(iso, { zone: 'utc' }));
  return {
    logicalDate: at(context.dagRun.logicalDate)!,
    dataIntervalStart: at(context.dagRun.dataIntervalStart),
    dataIntervalEnd: at(context.dagRun.dataIntervalEnd),
  };
}

/** The end of the run's data interval; a manual run's logical date (Airflow gives a manual run an interval ending there). */
function intervalEnd(context: RuntimeContext): DateTime {
  const dates = runDates(context);
  return dates.dataIntervalEnd ?? dates.logicalDate;
}

/**
 * A sensor done at a moment it works out from its run: done once the clock has passed it; in
 * deferrable mode it waits on a DateTimeTrigger for that moment (equal moments share one row);
 * in poke and reschedule modes its next poke is at the moment if that comes before the interval.
 */
abstract class MomentSensor extends BaseSensorOperator {
  /** Epoch ms at which the sensor is done, for this run. */
  abstract targetMs(context: RuntimeContext): number;

  override poke(context: RuntimeContext): boolean {
    return Date.now() >= this.targetMs(context);
  }

  override trigger(context: RuntimeContext): DateTimeTrigger {
    return new DateTimeTrigger({ moment: new Date(this.targetMs(context)) });
  }

  protected override nextPokeIn(pauseMs: number, context: RuntimeContext): number {
    return Math.max(0, Math.min(pauseMs, this.targetMs(context) - Date.now()));
  }
}

/** Done once `delta` has passed since the end of the run's data interval (Airflow's TimeDeltaSensor). */
export class TimeDeltaSensor extends MomentSensor {
  static readonly classpath = 'deferflow.sensors.TimeDeltaSensor';
  readonly deltaMs: number;

  constructor({ delta, ...options }: SensorOptions & { delta: DurationInput }) {
    super(options);
    const ms = Duration.isDuration(delta) ? (delta.isValid ? delta.toMillis() : Number.NaN) : typeof delta === 'number' ? delta * 1000 : Number.NaN;
    if (!Number.isFinite(ms))
      throw new InvalidSensorError('TimeDeltaSensor', `delta: expected a luxon Duration or a number of seconds, got ${JSON.stringify(delta)}`);
    this.deltaMs = ms;
  }

  targetMs(context: RuntimeContext): number {
    return intervalEnd(context).toMillis() + this.deltaMs;
  }
}

/**
 * Done once the clock passes `targetTime` (a time of day, `HH:mm` or `HH:mm:ss`) in `timezone`
 * (an IANA zone, default UTC) on the day the run's data interval ends there (Airflow's TimeSensor).
 */
export class TimeSensor extends MomentSensor {
  static readonly classpath = 'deferflow.sensors.TimeSensor';
  readonly targetTime: string;
  readonly timezone: string;
  readonly #time: { hour: number; minute: number; second: number };

  constructor({ targetTime, timezone = 'UTC', ...options }: SensorOptions & { targetTime: string; timezone?: string }) {
    super(options);
    const match = typeof targetTime === 'string' ? /^([01]\d|2[0-3]):([0-5]\d)(?::([0-5]\d))?$/.exec(targetTime) : null;
    if (!match) throw new InvalidSensorError('TimeSensor', `targetTime: expected a time of day "HH:mm" or "HH:mm:ss", got ${JSON.stringify(targetTime)}`);
    if (typeof timezone !== 'string' || !DateTime.now().setZone(timezone).isValid) {
      throw new InvalidSensorError('TimeSensor', `timezone: ${JSON.stringify(timezone)} is not an IANA time zone (e.g. "Europe/Paris", "UTC")`);
    }
    this.targetTime = targetTime;
    this.timezone = timezone;
    this.#time = { hour: Number(match[1]), minute: Number(match[2]), second: Number(match[3] ?? 0) };
  }

  targetMs(context: RuntimeContext): number {
    return intervalEnd(context)
      .setZone(this.timezone)
      .set({ ...this.#time, millisecond: 0 })
      .toMillis();
  }
}

/**
 * Done once the clock passes `targetTime`: a moment (ISO-8601 with an offset, a Date, a luxon
 * DateTime), or a function of the run's dates that returns one (Airflow's templated
 * DateTimeSensor: `({ dataIntervalEnd }) => dataIntervalEnd.plus({ hours: 1 })`).
 */
export class DateTimeSensor extends MomentSensor {
  static readonly classpath = 'deferflow.sensors.DateTimeSensor';
  readonly #target: MomentInput | ((run: RunDates) => MomentInput);

  constructor({ targetTime, ...options }: SensorOptions & { targetTime: MomentInput | ((run: RunDates) => MomentInput) }) {
    super(options);
    if (typeof targetTime !== 'function') momentMs(targetTime);
    this.#target = targetTime;
  }

  targetMs(context: RuntimeContext): number {
    return momentMs(typeof this.#target === 'function' ? this.#target(runDates(context)) : this.#target);
  }
}

/** A moment's epoch ms, checked as DateTimeTrigger checks it; DF_INVALID_SENSOR naming the field. */
function momentMs(moment: MomentInput): number {
  try {
    return new DateTimeTrigger({ moment }).momentMs;
  } catch (error) {
    if (error instanceof InvalidTriggerArgumentError) throw new InvalidSensorError('DateTimeSensor', `targetTime: ${error.message}`);
    throw error;
  }
}
