import { BaseSensorOperator, type SensorOptions } from '../src/authoring/sensors/base-sensor.ts';
import { PokeReturnValue } from '../src/authoring/sensors/poke-result.ts';
import type { JsonValue } from '../src/vocabulary/serialization/json.ts';
import type { PokeContext } from '../src/authoring/sensors/sensor-class.ts';
import { checkSensorOptions } from './sensor-option-error.ts';
import { checkHttp, HttpTrigger, resolveHttpCheck, type HttpCheck } from './http-trigger.ts';

/**
 * Waits until a URL answers as asked (Airflow's HttpSensor): one of `expectedStatus`, and, if
 * given, a JSON field (`jsonPath`) equal to `jsonEquals` or a body containing `bodyContains`.
 * Its return value is `{ url, status }`. Deferrable, it waits on an HttpTrigger with the same
 * check, so sensors watching the same URL the same way share one trigger row. Secrets (a token,
 * a password) come from a named `connection`, read where the request is made; no row holds them.
 */
export class HttpSensor extends BaseSensorOperator {
  static readonly classpath = 'deferflow.sensors.HttpSensor';
  readonly check: ReturnType<typeof resolveHttpCheck>;

  constructor({
    url,
    connection,
    headers,
    method,
    expectedStatus,
    jsonPath,
    jsonEquals,
    bodyContains,
    requestTimeout,
    connectAttempts,
    ...options
  }: SensorOptions & HttpCheck) {
    super(options);
    this.check = checkSensorOptions('HttpSensor', () =>
      resolveHttpCheck({ url, connection, headers, method, expectedStatus, jsonPath, jsonEquals, bodyContains, requestTimeout, connectAttempts }, 'HttpSensor'),
    );
  }

  async poke(context: PokeContext): Promise<boolean | PokeReturnValue> {
    const answer = await checkHttp(this.check, context.signal, (ms) => new Promise((resolve) => setTimeout(resolve, ms)));
    return answer === null ? false : new PokeReturnValue(true, { ...answer });
  }

  override trigger(): HttpTrigger {
    return new HttpTrigger({ ...this.check, pollInterval: this.pokeIntervalMs / 1000 });
  }

  override sensorDone(_context: unknown, event: JsonValue): JsonValue | undefined {
    return event ?? undefined;
  }
}
