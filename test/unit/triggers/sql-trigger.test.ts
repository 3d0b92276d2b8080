import { describe, expect, it } from 'vitest';
import { isTruthyCell } from '../../../src/index.ts';
import { SqlSensor, SqlTrigger } from '../../../triggers/index.ts';

describe('SqlTrigger', () => {
  it('serializes the connection name and query, never a URL, and back to an equal trigger', () => {
    const trigger = new SqlTrigger({ connection: 'warehouse', sql: 'select done from jobs where id = $1', parameters: [42] });
    expect(trigger.serialize()).toEqual({
      classpath: 'deferflow.triggers.SqlTrigger',
      kwargs: { connection: 'warehouse', sql: 'select done from jobs where id = $1', parameters: [42], pollInterval: 60 },
    });
    expect(new SqlTrigger(trigger.serialize().kwargs as never).serialize()).toEqual(trigger.serialize());
  });

  it.each([
    [{ connection: 'postgres://u:p@h/db', sql: 'select 1' }, 'SqlTrigger: connection "postgres://u:p@h/db" is not a connection name'],
    [{ connection: 'w', sql: '  ' }, 'sql "  " is not a query'],
    [{ connection: 'w', sql: 'select 1', parameters: 'x' }, 'parameters "x" is not a list of values'],
    [{ connection: 'w', sql: 'select 1', pollInterval: -1 }, 'pollInterval number -1 is not a number of seconds above 0'],
    [{ connection: 'w', sql: 'select 1', url: 'x' }, 'unknown field "url"'],
  ])('refuses %j, naming the field', (kwargs, message) => {
    expect(() => new SqlTrigger(kwargs as never)).toThrow(message);
  });

  it('SqlSensor refuses the same at DAG load, as DF_INVALID_SENSOR', () => {
    expect(() => new SqlSensor({ taskId: 's', connection: '', sql: 'select 1' })).toThrow(/^SqlSensor: connection "" is not a connection name/);
  });

  it('counts a first cell as done the way Airflow does', () => {
    expect([1, '1', 'yes', true, 2n, '2024-01-01'].map(isTruthyCell)).toEqual([true, true, true, true, true, true]);
    expect([undefined, null, false, 0, 0n, '0', ''].map(isTruthyCell)).toEqual([false, false, false, false, false, false, false]);
  });
});
