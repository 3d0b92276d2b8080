// `deferflow tasks list | clear` as users run them, against a run prepared in the database.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { processDagFolder, serializedDagSource } from '../../src/services/dags/dag-processor.ts';
import { toDbTime } from '../../src/database/schema.ts';
import { TaskDeferred } from '../../src/index.ts';
import { openStores } from '../../src/storage/index.ts';
import * as t from '../fixtures/test-triggers.ts';
import { processScratch } from '../support/process-scratch.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { PACKAGE_ENTRY, spawnDeferflow, type TriggererProcess } from '../support/processes.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

const DAG = `
import { BaseOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
class Step extends BaseOperator { execute() { return 1; } }
export const dag = new Dag({ dagId: 'etl', defaultArgs: { retries: 2 } });
const extract = new Step({ taskId: 'extract' });
const load = new Step({ taskId: 'load' });
dag.add(extract, load);
extract.before(load);
`;

const run = async (proc: TriggererProcess) => ({ exit: await proc.exit, out: proc.text, err: proc.stderr });

describe.each(testDialects)('deferflow tasks on %s', (dialect) => {
  it("lists a run's task instances, and clears a deferred one: its trigger goes, its try budget is renewed, the run is queued again", async () => {
    const db = await scratch.database(dialect);
    const dir = scratch.dir('tasks');
    writeFileSync(path.join(dir, 'etl.mts'), DAG);
    await processDagFolder(db, dir);
    const storage = openStores(db);
    const dagRunId = (await storage.dagRuns.createDagRun((await serializedDagSource(db)('etl'))!, {
      runId: 'r1',
      runType: 'manual',
      logicalDate: Date.now(),
      conf: {},
    }))!;
    const ids = Object.fromEntries((await storage.dagRuns.taskInstancesOfRun('etl', 'r1')).map((ti) => [ti.taskId, ti.id]));
    await db.db.updateTable('task_instance').set({ state: 'success', try_number: 1 }).where('id', '=', ids.extract!).execute();
    await db.db.updateTable('task_instance').set({ state: 'running', try_number: 3 }).where('id', '=', ids.load!).execute();
    const { triggerId } = await storage.taskInstances.deferTaskInstance(ids.load!, new TaskDeferred({ trigger: new t.NeverTrigger({}), method: 'resume' }));
    await db.db.updateTable('dag_run').set({ state: 'failed' }).where('id', '=', dagRunId).execute();

    const listed = await run(spawnDeferflow(['tasks', 'list', '--db', db.url, '--run', 'r1', '--json']));
    expect(listed.exit).toEqual({ code: 0, signal: null });
    expect(
      JSON.parse(listed.out.join('\n')).map((row: { task_id: string; state: string; try_number: number }) => [row.task_id, row.state, row.try_number]),
    ).toEqual([
      ['extract', 'success', 1],
      ['load', 'deferred', 3],
    ]);

    // No --dag: the run names its DAG, as for tasks list and logs.
    const cleared = await run(spawnDeferflow(['tasks', 'clear', '--db', db.url, '--run', 'r1', '--task', 'load']));
    expect(cleared.exit, cleared.err.join('\n')).toEqual({ code: 0, signal: null });
    expect(cleared.out).toEqual(['cleared 1 task instance(s); stopped 1 trigger(s)']);
    const load = await db.db.selectFrom('task_instance').selectAll().where('id', '=', ids.load!).executeTakeFirstOrThrow();
    expect(load).toMatchObject({ state: null, trigger_id: null, next_method: null, try_number: 3, max_tries: 5 });
    expect(await db.db.selectFrom('trigger').select('id').where('id', '=', triggerId).execute()).toEqual([]);
    expect((await db.db.selectFrom('task_instance').select('state').where('id', '=', ids.extract!).executeTakeFirstOrThrow()).state).toBe('success');
    expect(await db.db.selectFrom('dag_run').select(['state', 'end_date']).where('id', '=', dagRunId).executeTakeFirstOrThrow()).toEqual({
      state: 'queued',
      end_date: null,
    });

    // The DAG deleted since (its file gone): nothing is cleared, and the refusal says why and what to do.
    await db.db
      .updateTable('serialized_dag')
      .set({ deleted_at: toDbTime(Date.now()) })
      .where('dag_id', '=', 'etl')
      .execute();
    const ofDeleted = await run(spawnDeferflow(['tasks', 'clear', '--db', db.url, '--run', 'r1', '--task', 'extract']));
    expect(ofDeleted.exit).toEqual({ code: 2, signal: null });
    expect(ofDeleted.err.join('\n')).toContain(
      'error [DF_INVALID_OPTION]: run: run "r1" is of DAG etl, which is not among the serialized DAGs (deleted, or never processed): nothing is cleared; put its file back in the DAG folder (deferflow dags reserialize) and clear again',
    );
    expect((await db.db.selectFrom('task_instance').select('state').where('id', '=', ids.extract!).executeTakeFirstOrThrow()).state).toBe('success');

    const unknown = await run(spawnDeferflow(['tasks', 'list', '--db', db.url, '--run', 'nope']));
    expect(unknown.exit).toEqual({ code: 2, signal: null });
    expect(unknown.err.join('\n')).toContain('error [DF_INVALID_OPTION]: run: no task instances of run "nope"');
  }, 30_000);
});
