// `deferflow triggers list`: each trigger with its classpath, the triggerer running it, its age,
// and the task instances waiting on it (a shared trigger names them all); never its kwargs.
import { afterAll, describe, expect, it } from 'vitest';
import { anyOf, TaskDeferred } from '../../src/index.ts';
import { openStores } from '../../src/storage/index.ts';
import { DateTimeTrigger } from '../../triggers/index.ts';
import { dropTestDatabases, oneDialect } from '../support/databases.ts';
import { createTaskInstance, waitFor } from '../support/fixtures.ts';
import { processScratch } from '../support/process-scratch.ts';
import { spawnDeferflow, spawnTriggerer, stopCleanly } from '../support/processes.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

type TriggerJson = {
  id: number;
  classpath: string;
  triggerer_id: number | null;
  age_s: number;
  task_instance_count: number;
  task_instances: { id: number }[];
  member_of: number[];
};

// What differs between dialects (the listing's query) is tested on each in
// test/unit/listings.test.ts; the command runs on one.
describe.each(oneDialect)('deferflow triggers list on %s', (dialect) => {
  it('lists triggers with their owner, age and waiting task instances, a shared one with all of them', async () => {
    const db = await scratch.database(dialect);
    const storage = openStores(db);
    const list = async (...more: string[]) => {
      const proc = spawnDeferflow(['triggers', 'list', '--db', db.url, ...more]);
      expect((await proc.exit).code, proc.describe()).toBe(0);
      return proc.text;
    };
    expect(await list()).toEqual(['no triggers']);
    const defer = async (moment: string) => {
      const id = await createTaskInstance(db, { state: 'running' });
      await storage.taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger: new DateTimeTrigger({ moment }), method: 'resume' }));
      return id;
    };
    // Two identical waits share one trigger row; a third waits on its own.
    const shared = [await defer('2100-01-01T00:00:00Z'), await defer('2100-01-01T00:00:00Z')];
    const alone = await defer('2101-01-01T00:00:00Z');
    const unowned = JSON.parse((await list('--json')).join('\n')) as TriggerJson[];
    expect(unowned.map((trigger) => [trigger.classpath, trigger.triggerer_id, trigger.task_instance_count, trigger.task_instances.map((ti) => ti.id)])).toEqual(
      [
        ['deferflow.triggers.DateTimeTrigger', null, 2, shared],
        ['deferflow.triggers.DateTimeTrigger', null, 1, [alone]],
      ],
    );

    const triggerer = spawnTriggerer(['--db', db.url, '--poll-interval', '0.2']);
    const jobId = await triggerer.waitForJob();
    const owned = await waitFor(
      async () => {
        const rows = JSON.parse((await list('--json')).join('\n')) as TriggerJson[];
        return rows.every((row) => row.triggerer_id === jobId) ? rows : null;
      },
      { what: 'both triggers owned' },
    );
    expect(owned).toHaveLength(2);
    expect(owned[0]!.age_s).toBeGreaterThanOrEqual(0);
    const table = await list('--triggerer', String(jobId));
    expect(table[0]).toMatch(/^ID +CLASSPATH +TRIGGERER +AGE +TASK INSTANCES$/);
    expect(table[1]).toMatch(
      new RegExp(
        `^${owned[0]!.id} +deferflow\\.triggers\\.DateTimeTrigger +${jobId} on \\S+ +[\\d.]+ s +2: test_dag\\.\\S+ \\(manual__1\\), test_dag\\.\\S+ \\(manual__1\\)$`,
      ),
    );
    // The kwargs (which may hold secrets) are never shown.
    expect(table.join('\n')).not.toContain('2100-01-01');
    expect(await list('--triggerer', String(jobId + 100))).toEqual(['no triggers']);

    // A composite wait's members are waited on through it: each names it.
    const composite = await createTaskInstance(db, { state: 'running' });
    const either = anyOf([new DateTimeTrigger({ moment: '2100-01-01T00:00:00Z' }), new DateTimeTrigger({ moment: '2102-01-01T00:00:00Z' })]);
    await storage.taskInstances.deferTaskInstance(composite, new TaskDeferred({ trigger: either, method: 'resume' }));
    const withComposite = JSON.parse((await list('--json')).join('\n')) as TriggerJson[];
    const anyRow = withComposite.find((row) => row.classpath === 'deferflow.triggers.AnyOf')!;
    expect(withComposite.map((row) => [row.classpath, row.task_instance_count, row.member_of])).toEqual([
      ['deferflow.triggers.DateTimeTrigger', 2, [anyRow.id]],
      ['deferflow.triggers.DateTimeTrigger', 1, []],
      ['deferflow.triggers.AnyOf', 1, []],
      ['deferflow.triggers.DateTimeTrigger', 0, [anyRow.id]],
    ]);
    expect((await list()).find((line) => line.startsWith(`${withComposite[3]!.id} `))).toMatch(new RegExp(` 0; member of composite ${anyRow.id}$`));
    await stopCleanly([triggerer]);
  }, 60_000);
});
