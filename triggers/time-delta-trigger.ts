import { DateTime, Duration } from 'luxon';
import { DateTimeTrigger, describeValue } from './date-time-trigger.ts';
import { InvalidTriggerArgumentError } from '../src/vocabulary/errors.ts';
import type { SerializedTrigger } from '../src/authoring/triggers/base-trigger.ts';
import { nowPlusPlaceholder } from '../src/authoring/triggers/start-trigger-kwargs.ts';

/**
 * Fires `delta` after it is constructed (a luxon Duration, or a number of seconds >= 0).
 *
 * It is a DateTimeTrigger for the absolute moment now + delta, and it serializes as one
 * (classpath deferflow.triggers.DateTimeTrigger, kwargs { moment }), as in Airflow: the
 * triggerer rebuilds a DateTimeTrigger, so a wait survives restarts without drifting and
 * identical moments share a trigger row. It has no static classpath of its own on purpose: no
 * trigger row ever names it, and it is not in BUILTIN_TRIGGERS.
 *
 * `endFromTrigger: true` ends the task instances as success when it fires (see DateTimeTrigger).
 *
 * A Duration with calendar units (months, years) is added in UTC calendar terms
 * (`DateTime.plus`), so `{ months: 1 }` from Jan 31 lands on Feb 28/29.
 */
export class TimeDeltaTrigger extends DateTimeTrigger {
  // Only TimeDeltaTriggers made in DAG and task code carry this; the triggerer rebuilds plain DateTimeTriggers.
  readonly #delta: Duration;

  constructor(kwargs: { delta: Duration | number; endFromTrigger?: boolean }) {
    const { endFromTrigger, ...rest } = kwargs ?? ({} as typeof kwargs);
    super(endFromTrigger === undefined ? { moment: momentAfter(rest) } : { moment: momentAfter(rest), endFromTrigger });
    this.#delta = typeof rest.delta === 'number' ? Duration.fromMillis(rest.delta * 1000) : rest.delta;
  }

  /** As a start trigger, the delay counts from when the task starts, not from when its DAG was serialized. */
  override serializeAsStartTrigger(): SerializedTrigger {
    const { classpath, kwargs } = this.serialize();
    return { classpath, kwargs: { ...kwargs, moment: nowPlusPlaceholder(this.#delta) } };
  }
}

function momentAfter(kwargs: { delta: Duration | number }): Date {
  if (kwargs === null || typeof kwargs !== 'object') {
    throw new InvalidTriggerArgumentError('TimeDeltaTrigger', `expected kwargs { delta }, got ${describeValue(kwargs)}`);
  }
  for (const key in kwargs) {
    if (key !== 'delta') {
      throw new InvalidTriggerArgumentError('TimeDeltaTrigger', `unknown kwarg ${JSON.stringify(key)} (the kwargs are delta and endFromTrigger)`);
    }
  }
  const delta: unknown = kwargs.delta;
  const now = Date.now();
  let ms: number;
  if (typeof delta === 'number') {
    if (!Number.isFinite(delta) || delta < 0) throw invalidDelta(delta, delta < 0 ? 'is negative' : 'is not a finite number');
    ms = now + delta * 1000;
  } else if (Duration.isDuration(delta)) {
    if (!delta.isValid) throw invalidDelta(delta, 'is an invalid luxon Duration');
    const length = delta.toMillis();
    if (!Number.isFinite(length)) throw invalidDelta(delta, 'is not finite');
    if (length < 0) throw invalidDelta(delta, 'is negative');
    ms = DateTime.fromMillis(now, { zone: 'utc' }).plus(delta).toMillis();
  } else {
    throw invalidDelta(delta, 'is neither a luxon Duration nor a number of seconds');
  }
  const moment = new Date(ms);
  if (!Number.isFinite(moment.getTime())) throw invalidDelta(delta, 'puts the moment out of the range of dates');
  if (ms < now) throw invalidDelta(delta, 'lands before now (its calendar units and negative parts cancel out)');
  return moment;
}

function invalidDelta(delta: unknown, why: string): InvalidTriggerArgumentError {
  const shown = Duration.isDuration(delta)
    ? delta.isValid
      ? `Duration ${delta.toISO()}`
      : `Duration(invalid: ${delta.invalidReason}${delta.invalidExplanation ? `, ${delta.invalidExplanation}` : ''})`
    : describeValue(delta);
  return new InvalidTriggerArgumentError(
    'TimeDeltaTrigger',
    `delta ${shown} ${why}; pass a luxon Duration or a number of seconds >= 0 (e.g. Duration.fromObject({ minutes: 5 }) or 300)`,
  );
}
