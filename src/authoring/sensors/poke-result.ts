import { InvalidSensorError } from '../../vocabulary/errors.ts';
import type { JsonValue } from '../../vocabulary/serialization/json.ts';

const POKE_RETURN_BRAND = Symbol.for('deferflow.PokeReturnValue');

/**
 * What a poke may return instead of a boolean (Airflow's PokeReturnValue): whether the condition
 * holds, and a JSON value that becomes the task's return value for downstream tasks.
 */
export class PokeReturnValue {
  /** A brand: lets the is…() checks recognise it whichever copy of deferflow made it. */
  readonly [POKE_RETURN_BRAND] = true;
  constructor(
    /** Whether the condition holds (the sensor succeeds). */
    readonly isDone: boolean,
    /** The value the task returns for downstream tasks once done. */
    readonly xcomValue: JsonValue = null,
  ) {}
}

/** Whether a value is a PokeReturnValue (a brand check: true whichever copy of deferflow made it). */
export function isPokeReturnValue(value: unknown): value is PokeReturnValue {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[POKE_RETURN_BRAND] === true;
}

export interface PokeResult {
  readonly done: boolean;
  /** The task's return value once done (undefined: none). */
  readonly value: JsonValue | undefined;
}

/** A poke's answer as a result; anything but a boolean or a PokeReturnValue is refused, naming the sensor. */
export function pokeResult(answer: unknown, sensor: string): PokeResult {
  if (typeof answer === 'boolean') return { done: answer, value: undefined };
  if (isPokeReturnValue(answer)) return { done: answer.isDone, value: answer.isDone ? answer.xcomValue : undefined };
  throw new InvalidSensorError(sensor, `poke() returned ${answer === null ? 'null' : typeof answer}; return true/false or a PokeReturnValue`);
}

/**
 * The pause after the `pokes`-th poke that found nothing, with exponential backoff: the interval
 * doubled each time, capped at `maxWaitMs` (null: no cap). What a sensor waits between pokes on
 * a worker and what its consolidated wait waits on the triggerer.
 */
export function backoffPause(intervalMs: number, pokes: number, maxWaitMs: number | null): number {
  const pause = intervalMs * 2 ** Math.min(Math.max(pokes, 1) - 1, 40);
  return maxWaitMs === null ? pause : Math.min(pause, maxWaitMs);
}
