import { BaseTrigger, type SerializedTrigger } from '../src/authoring/triggers/base-trigger.ts';
import { InvalidTriggerArgumentError } from '../src/vocabulary/errors.ts';
import { isTruthyCell, queryFirstCell } from '../src/authoring/connections/sql-connection.ts';
import { TriggerEvent } from '../src/authoring/triggers/trigger-event.ts';
import type { JsonValue } from '../src/vocabulary/serialization/json.ts';
import { checkConnectionName } from './kwarg-checks.ts';
import { describeValue } from './date-time-trigger.ts';

export interface SqlCheck {
  /** A named connection (DEFERFLOW_CONN_<NAME>): a sqlite: or postgres:// URL. Its URL is never stored. */
  readonly connection: string;
  /** A query whose first cell says whether the wait is over (not null, false, 0, "0" or ""). */
  readonly sql: string;
  /** Values for the query's placeholders (`?` on SQLite, `$1` on PostgreSQL). @default [] */
  readonly parameters?: readonly JsonValue[];
}

export interface SqlTriggerKwargs extends SqlCheck {
  /** Seconds between queries. @default 60 */
  readonly pollInterval?: number;
}

/** The check validated: InvalidTriggerArgumentError naming `owner` and the field. */
export function resolveSqlCheck(given: SqlCheck, owner: string): Required<SqlCheck> {
  const invalid = (why: string) => new InvalidTriggerArgumentError(owner, why);
  if (given === null || typeof given !== 'object') throw invalid(`expected { connection, sql }, got ${describeValue(given)}`);
  const { connection, sql, parameters = [] } = given;
  checkConnectionName(connection, invalid);
  if (typeof sql !== 'string' || sql.trim() === '') throw invalid(`sql ${describeValue(sql)} is not a query`);
  if (!Array.isArray(parameters)) throw invalid(`parameters ${describeValue(parameters)} is not a list of values`);
  return { connection, sql, parameters };
}

/**
 * Fires once a query on a named connection returns a truthy first cell (Airflow's SqlSensor
 * rule), checking at once and then every pollInterval seconds; the payload is `{ value }`, that
 * cell. The row stores the connection's name, never its URL. A query that fails (a syntax error,
 * a missing table, an unknown connection) fails the trigger, naming why.
 */
export class SqlTrigger extends BaseTrigger {
  static readonly classpath = 'deferflow.triggers.SqlTrigger';
  readonly check: Required<SqlCheck>;
  readonly pollInterval: number;

  constructor(kwargs: SqlTriggerKwargs) {
    super();
    const { pollInterval = 60, ...check } = kwargs ?? ({} as SqlTriggerKwargs);
    for (const key of Object.keys(check)) {
      if (!['connection', 'sql', 'parameters'].includes(key))
        throw new InvalidTriggerArgumentError('SqlTrigger', `unknown field ${JSON.stringify(key)} (the fields are connection, sql, parameters, pollInterval)`);
    }
    this.check = resolveSqlCheck(check, 'SqlTrigger');
    if (typeof pollInterval !== 'number' || !(pollInterval > 0))
      throw new InvalidTriggerArgumentError('SqlTrigger', `pollInterval ${describeValue(pollInterval)} is not a number of seconds above 0`);
    this.pollInterval = pollInterval;
  }

  override serialize(): SerializedTrigger {
    return { classpath: SqlTrigger.classpath, kwargs: { ...this.check, parameters: [...this.check.parameters], pollInterval: this.pollInterval } };
  }

  override async *run(): AsyncGenerator<TriggerEvent<{ value: JsonValue }>> {
    for (;;) {
      const cell = await queryFirstCell(this.check.connection, this.check.sql, this.check.parameters);
      if (isTruthyCell(cell)) {
        yield new TriggerEvent({ value: jsonCell(cell) });
        return;
      }
      await this.sleep(this.pollInterval * 1000);
    }
  }
}

/** A cell as JSON: a bigint or a Date as text, the rest as it is. */
export function jsonCell(cell: unknown): JsonValue {
  if (typeof cell === 'bigint') return cell.toString();
  if (cell instanceof Date) return cell.toISOString();
  if (Buffer.isBuffer(cell)) return cell.toString('base64');
  return cell as JsonValue;
}
