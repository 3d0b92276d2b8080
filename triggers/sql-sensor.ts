import { BaseSensorOperator, type SensorOptions } from '../src/authoring/sensors/base-sensor.ts';
import { isTruthyCell, queryFirstCell } from '../src/authoring/connections/sql-connection.ts';
import { PokeReturnValue } from '../src/authoring/sensors/poke-result.ts';
import type { JsonValue } from '../src/vocabulary/serialization/json.ts';
import { checkSensorOptions } from './sensor-option-error.ts';
import { jsonCell, resolveSqlCheck, SqlTrigger, type SqlCheck } from './sql-trigger.ts';

/**
 * Waits until a query on a named connection returns a truthy first cell (Airflow's SqlSensor);
 * its return value is `{ value }`, that cell. Deferrable, it waits on a SqlTrigger with the same
 * query, so sensors asking the same thing share one trigger row. The connection is named, never
 * its URL: set DEFERFLOW_CONN_<NAME> for the worker and the triggerer.
 */
export class SqlSensor extends BaseSensorOperator {
  static readonly classpath = 'deferflow.sensors.SqlSensor';
  readonly check: Required<SqlCheck>;

  constructor({ connection, sql, parameters, ...options }: SensorOptions & SqlCheck) {
    super(options);
    this.check = checkSensorOptions('SqlSensor', () => resolveSqlCheck({ connection, sql, parameters }, 'SqlSensor'));
  }

  async poke(): Promise<boolean | PokeReturnValue> {
    const cell = await queryFirstCell(this.check.connection, this.check.sql, this.check.parameters);
    return isTruthyCell(cell) ? new PokeReturnValue(true, { value: jsonCell(cell) }) : false;
  }

  override trigger(): SqlTrigger {
    return new SqlTrigger({ ...this.check, pollInterval: this.pokeIntervalMs / 1000 });
  }

  override sensorDone(_context: unknown, event: JsonValue): JsonValue | undefined {
    return event ?? undefined;
  }
}
