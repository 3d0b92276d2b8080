import type { JsonObject } from '../../vocabulary/serialization/json.ts';
import type { DagRunStates, DagRunStatesQuery } from '../../model/dag-run-states.ts';

/**
 * What the triggerer needs of a sensor class to run its poke in a consolidated wait: a name to
 * allow it by, the fields that define what it waits for, and a way to make one from them.
 * Recognised by a registered symbol (a DAG file or trigger module may carry its own copy of
 * deferflow), as trigger classes are.
 */
export const SENSOR_BRAND = Symbol.for('deferflow.BaseSensorOperator');

/** What a sensor's poke() is given on the triggerer (deferrable mode): the fields its class names in pokeContextFields, and a logger. */
export interface PokeContext {
  /** The poke's logger: the task's log on a worker, the trigger's on the triggerer. */
  readonly log: import('pino').Logger;
  /** Aborted when the wait is abandoned (the execution timeout, a stopping worker, a cancelled trigger). */
  readonly signal: AbortSignal;
  /**
   * A DAG run's states from deferflow's own database (read-only; reads of many sensors are
   * batched into one query a second); null while the run does not exist.
   */
  dagRunStates(query: DagRunStatesQuery): Promise<DagRunStates | null>;
}

export interface SensorInstance {
  poke(context: PokeContext): unknown;
}

/** A sensor class as the triggerer pokes it in deferrable mode: its classpath, pokeContextFields and a static poke. */
export type SensorClass = (new (
  options: never,
) => SensorInstance) & {
  readonly classpath?: string;
  readonly pokeContextFields?: readonly string[];
};

/** Whether a value is a sensor class the triggerer can poke (a subclass of BaseSensorOperator with a classpath). */
export function isSensorClass(value: unknown): value is SensorClass {
  return typeof value === 'function' && (value as unknown as Record<symbol, unknown>)[SENSOR_BRAND] === true;
}

/** A sensor class's name on the allow-list: its own static classpath, else its class name. */
export function sensorClasspathOf(cls: SensorClass): string {
  return Object.hasOwn(cls, 'classpath') && typeof cls.classpath === 'string' ? cls.classpath : cls.name;
}

/** A sensor made on the triggerer from its poke context (the task id is not needed to poke). */
export function sensorFromPokeContext(cls: SensorClass, pokeContext: JsonObject): SensorInstance {
  return new (cls as unknown as new (options: JsonObject) => SensorInstance)({ taskId: '__consolidated_poke__', ...pokeContext });
}
