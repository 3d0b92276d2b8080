// The streaming example (examples/dags/streaming_demo.ts) as a user runs it: one
// `deferflow standalone` process from the repository, on one dialect (its signals are tested on both elsewhere). A long-running
// producer signals five batches; each batch signal restarts the batch task as a new try, which
// handles the batch it was restarted for.
import { afterAll, describe, expect, it } from 'vitest';
import { dropTestDatabases, oneDialect } from '../support/databases.ts';
import { spawnDeferflow } from '../support/processes.ts';
import { processScratch } from '../support/process-scratch.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

describe.each(oneDialect)('the streaming example on %s', (dialect) => {
  it('runs the producer once and the batch task once per batch signal, ending on the last batch', async () => {
    const db = await scratch.database(dialect);
    const run = spawnDeferflow(['standalone', '--db', db.url, '--dags', 'examples/dags', '--trigger-dag', 'streaming_demo', '--exit-when-done']);
    expect((await run.exit).code).toBe(0);

    const tis = await db.db
      .selectFrom('task_instance')
      .select(['task_id', 'state', 'try_number', 'return_value', 'id'])
      .where('dag_id', '=', 'streaming_demo')
      .orderBy('task_id')
      .execute();
    const [batchTask, producer] = tis;
    expect(producer).toMatchObject({ task_id: 'produce', state: 'success', try_number: 1 });
    expect(JSON.parse(producer!.return_value!)).toEqual({ batches: 5 });
    expect(batchTask).toMatchObject({ task_id: 'process_batch', state: 'success' });
    expect(JSON.parse(batchTask!.return_value!)).toMatchObject({ batch: 5, rows: 140 });
    // One try per batch signal acted on: five, unless two batches came before the scheduler acted
    // (then acted on together, as one); never more than one per signal.
    expect(batchTask!.try_number).toBeGreaterThanOrEqual(1);
    expect(batchTask!.try_number).toBeLessThanOrEqual(5);
    const handled: number[] = [];
    for (let tryNumber = 1; tryNumber <= batchTask!.try_number; tryNumber++) {
      const logs = spawnDeferflow([
        'tasks',
        'logs',
        '--db',
        db.url,
        '--dag',
        'streaming_demo',
        '--task',
        'process_batch',
        '--run',
        await runId(),
        '--try',
        String(tryNumber),
      ]);
      expect((await logs.exit).code).toBe(0);
      const match = /processing batch (\d+)/.exec(logs.text.join('\n'));
      expect(match, `try ${tryNumber}'s log`).not.toBe(null);
      handled.push(Number(match![1]));
    }
    // Each try handled a later batch than the one before, the last one the fifth.
    expect(handled).toEqual([...handled].sort((a, b) => a - b));
    expect(new Set(handled).size).toBe(handled.length);
    expect(handled.at(-1)).toBe(5);

    async function runId(): Promise<string> {
      return (await db.db.selectFrom('dag_run').select('run_id').where('dag_id', '=', 'streaming_demo').executeTakeFirstOrThrow()).run_id;
    }
  }, 90_000);
});
