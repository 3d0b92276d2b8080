import { InvalidTriggerArgumentError } from '../../vocabulary/errors.ts';
import { canonicalJson, type JsonObject, type JsonValue } from '../../vocabulary/serialization/json.ts';
import { BaseTrigger, type SerializedTrigger } from '../triggers/base-trigger.ts';
import { TriggerEvent } from '../triggers/trigger-event.ts';
import { backoffPause, pokeResult } from './poke-result.ts';
import type { DagRunStatesQuery } from '../../model/dag-run-states.ts';
import { sensorFromPokeContext } from './sensor-class.ts';

/** The SensorPokeTrigger's kwargs: the sensor's classpath, its poke context and its poke interval. */
export interface SensorPokeKwargs {
  /** The sensor class's classpath, on the triggerer's allow-list. */
  readonly sensor: string;
  /** The sensor's poke context: the values of its pokeContextFields. */
  readonly pokeContext: JsonObject;
  /** Seconds between pokes. */
  readonly pokeInterval: number;
  /** A poke that throws counts as "not yet" (logged) instead of failing the wait. */
  readonly silentFail: boolean;
  /** Double the pause after each poke that found nothing; written only when set, so plain waits keep their rows. */
  readonly exponentialBackoff?: true;
  /** With exponentialBackoff, the longest pause in seconds; absent: none. */
  readonly maxWait?: number;
}

/**
 * The consolidated sensor wait (Airflow's Smart Sensor, AIP-17, done with a trigger): runs a
 * sensor class's poke on the triggerer at the poke interval, with the poke context as the sensor's
 * options, and fires once it holds. Sensors waiting on the same thing defer with equal kwargs, so
 * the core's dedup gives them one row and one poke per interval, however many task instances
 * wait; each keeps its own timeout (the deferral's) and softFail (the sensor's, when it resumes).
 * Only sensor classes the triggerer allows (exported by a --trigger-module) are ever made.
 */
export class SensorPokeTrigger extends BaseTrigger {
  /** The trigger's classpath. */
  static readonly classpath = 'deferflow.SensorPokeTrigger';
  /** The sensor's classpath, its poke context and its poke interval. */
  readonly kwargs: SensorPokeKwargs;

  constructor(kwargs: JsonObject) {
    super();
    const invalid = (why: string) => new InvalidTriggerArgumentError(SensorPokeTrigger.classpath, why);
    if (typeof kwargs.sensor !== 'string' || kwargs.sensor === '') throw invalid(`sensor must name a sensor class, got ${JSON.stringify(kwargs.sensor)}`);
    const pokeContext = kwargs.pokeContext;
    if (pokeContext === null || typeof pokeContext !== 'object' || Array.isArray(pokeContext))
      throw invalid(`pokeContext must be an object, got ${JSON.stringify(pokeContext)}`);
    if (typeof kwargs.pokeInterval !== 'number' || !(kwargs.pokeInterval > 0))
      throw invalid(`pokeInterval must be a number of seconds above 0, got ${JSON.stringify(kwargs.pokeInterval)}`);
    if (kwargs.exponentialBackoff !== undefined && kwargs.exponentialBackoff !== true && kwargs.exponentialBackoff !== false)
      throw invalid(`exponentialBackoff must be true or false, got ${JSON.stringify(kwargs.exponentialBackoff)}`);
    const backoff = kwargs.exponentialBackoff === true;
    if (kwargs.maxWait !== undefined && (!backoff || typeof kwargs.maxWait !== 'number' || !(kwargs.maxWait > 0)))
      throw invalid(`maxWait must be a number of seconds above 0, with exponentialBackoff: true; got ${JSON.stringify(kwargs.maxWait)}`);
    this.kwargs = {
      sensor: kwargs.sensor,
      pokeContext,
      pokeInterval: kwargs.pokeInterval,
      silentFail: kwargs.silentFail === true,
      ...(backoff ? { exponentialBackoff: true as const } : {}),
      ...(backoff && kwargs.maxWait !== undefined ? { maxWait: kwargs.maxWait as number } : {}),
    };
  }

  /** Its kwargs, as stored. */
  serialize(): SerializedTrigger {
    return { classpath: SensorPokeTrigger.classpath, kwargs: this.kwargs as unknown as JsonObject };
  }

  /** What the wait is for, as logs and the status page say it. */
  override describeWait(): string {
    return `sensor ${this.kwargs.sensor} ${canonicalJson(this.kwargs.pokeContext)}`;
  }

  /** Pokes the sensor's class every interval until a poke says done, and yields the value to return. */
  async *run(): AsyncGenerator<TriggerEvent<{ xcomValue: JsonValue }>> {
    const sensor = sensorFromPokeContext(this.allowedSensorClass(this.kwargs.sensor), this.kwargs.pokeContext);
    const context = { log: this.log, signal: this.signal, dagRunStates: (query: DagRunStatesQuery) => this.dagRunStates(query) };
    const { pokeInterval, exponentialBackoff, maxWait } = this.kwargs;
    for (let pokes = 1; ; pokes++) {
      let done = false;
      let value: JsonValue | undefined;
      try {
        ({ done, value } = pokeResult(await sensor.poke(context), this.kwargs.sensor));
      } catch (error) {
        if (!this.kwargs.silentFail) throw error;
        this.log.warn({ error: (error as Error)?.message ?? String(error) }, `poke of ${this.describeWait()} failed; silentFail: it counts as not yet`);
      }
      if (done) {
        yield new TriggerEvent({ xcomValue: value ?? null });
        return;
      }
      await this.sleep(exponentialBackoff ? backoffPause(pokeInterval * 1000, pokes, maxWait === undefined ? null : maxWait * 1000) : pokeInterval * 1000);
    }
  }
}
