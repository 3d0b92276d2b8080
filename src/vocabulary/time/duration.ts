import { Duration } from 'luxon';
import { InvalidOptionError } from '../errors.ts';

/** A length of time given as a luxon Duration or a number of seconds. */
export type DurationInput = Duration | number;

export function durationToMs(value: DurationInput, name: string): number {
  const ms = Duration.isDuration(value) ? (value.isValid ? value.toMillis() : Number.NaN) : value * 1000;
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) {
    throw new InvalidOptionError(name, `expected a luxon Duration or a number of seconds >= 0, got ${describe(value)}`);
  }
  return ms;
}

function describe(value: unknown): string {
  if (Duration.isDuration(value)) return value.isValid ? (value.toISO() ?? 'a Duration') : `an invalid Duration (${value.invalidReason})`;
  return typeof value === 'number' ? String(value) : typeof value;
}
