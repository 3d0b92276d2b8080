// The clear an operator asks for of one task instance of a mapped task (made with map indices by
// code that creates task instances itself): that instance goes back to no state, its siblings of
// other map indices keep theirs, and the tasks downstream are cleared whole; the audit log says so.
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { processDagFolder } from '../../src/services/dags/dag-processor.ts';
import { OperatorActions } from '../../src/services/operator-actions.ts';
import { openStores } from '../../src/storage/index.ts';
import { toDbTime } from '../../src/database/schema.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { migratedDatabase, type TestDatabase } from '../support/fixtures.ts';
import { PACKAGE_ENTRY } from '../support/processes.ts';
import { processScratch } from '../support/process-scratch.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

const MAPPED_DAG = `
import { BaseOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
class Plain extends BaseOperator { execute() { return 'done'; } }
const each = new Plain({ taskId: 'each' });
const after = new Plain({ taskId: 'after' });
export const dag = new Dag({ dagId: 'mapped' }).add(each, after);
each.before(after);
`;

describe.each(testDialects)('operator actions on %s', (dialect) => {
  let database: TestDatabase | null = null;
  afterEach(async () => {
    await database?.close();
    database = null;
  });

  it('clear one map index of a task: its siblings keep their state, the tasks downstream are cleared whole', async () => {
    database = await migratedDatabase(dialect);
    const dags = scratch.dir(`mapped-${dialect}`);
    mkdirSync(dags, { recursive: true });
    writeFileSync(path.join(dags, 'mapped.mjs'), MAPPED_DAG);
    await processDagFolder(database, dags);
    const done = { state: 'success' as const, try_number: 1, max_tries: 1, start_date: toDbTime(Date.now()), end_date: toDbTime(Date.now()) };
    await database.db
      .insertInto('dag_run')
      .values({
        dag_id: 'mapped',
        run_id: 'manual__mapped',
        state: 'success',
        run_type: 'manual',
        logical_date: toDbTime(Date.now()),
        created_at: toDbTime(Date.now()),
        updated_at: toDbTime(Date.now()),
        conf: '{}',
      } as never)
      .execute();
    for (const [taskId, mapIndex] of [
      ['each', 0],
      ['each', 1],
      ['each', 2],
      ['after', -1],
    ] as const)
      await database.db
        .insertInto('task_instance')
        .values({ dag_id: 'mapped', run_id: 'manual__mapped', task_id: taskId, map_index: mapIndex, queue: 'default', priority_weight: 1, ...done })
        .execute();
    const states = async () =>
      (await database!.db.selectFrom('task_instance').select(['task_id', 'map_index', 'state']).orderBy('task_id').orderBy('map_index').execute()).map(
        (row) => `${row.task_id}[${row.map_index}] ${row.state ?? 'none'}`,
      );
    const actions = new OperatorActions(database, { name: 'ann', source: 'web', address: '127.0.0.1' });
    const wanted = { runId: 'manual__mapped', taskIds: ['each'], mapIndexes: [1], downstream: true };
    expect(await actions.planClear(wanted)).toEqual({ dagId: 'mapped', runId: 'manual__mapped', taskIds: ['after', 'each'] });
    expect(await actions.clear(wanted)).toMatchObject({ cleared: 2, taskIds: ['after', 'each'] });
    expect(await states()).toEqual(['after[-1] none', 'each[0] success', 'each[1] none', 'each[2] success']);
    const [entry] = await openStores(database).audit.listAuditEntries({ limit: 1 });
    expect(entry).toMatchObject({ actor: 'ann', action: 'clear', outcome: 'cleared 2 task instance(s); stopped 0 trigger(s)' });
    // Without map indices, every instance of the task named.
    expect(await actions.clear({ runId: 'manual__mapped', taskIds: ['each'] })).toMatchObject({ cleared: 3 });
    expect(await states()).toEqual(['after[-1] none', 'each[0] none', 'each[1] none', 'each[2] none']);
  });
});
