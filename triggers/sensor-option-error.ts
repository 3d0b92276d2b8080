import { InvalidSensorError, InvalidTriggerArgumentError } from '../src/vocabulary/errors.ts';

/**
 * Runs a check of a built-in sensor's options that is written for its trigger (which throws
 * InvalidTriggerArgumentError) and reports a refusal as the sensor's own DF_INVALID_SENSOR, so
 * a bad option fails the DAG's load naming the sensor class and the field.
 */
export function checkSensorOptions<T>(sensor: string, check: () => T): T {
  try {
    return check();
  } catch (error) {
    if (error instanceof InvalidTriggerArgumentError) throw new InvalidSensorError(sensor, error.message.replace(new RegExp(`^${sensor}: `), ''));
    throw error;
  }
}
