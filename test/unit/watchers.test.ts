// Watchers in storage and on an in-process triggerer, on both dialects, judged by database rows
// and the triggerer's lines: the rows DAG processing makes (identical watchers of two DAGs are
// one row; a queue of their own), a batch written only by the watcher's owner with its cursor,
// an event delivered again making no second run, a failing watcher run again after a growing
// backoff without failing anything else, and a wait that yields WatchEvents failing its task.
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { TaskDeferred } from '../../src/authoring/operators/task-deferred.ts';
import { openStores } from '../../src/storage/index.ts';
import * as t from '../fixtures/test-triggers.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { processWatchingDags } from '../support/watching-dags.ts';
import { createTaskInstance, migratedDatabase, taskInstance, waitFor } from '../support/fixtures.ts';
import { startTriggerer } from '../support/in-process-triggerer.ts';

afterAll(dropTestDatabases);

describe.each(testDialects)('watchers on %s', (dialect) => {
  const open: { close(): Promise<void> }[] = [];
  afterEach(async () => {
    // A triggerer before its database: the last opened first.
    for (const item of open.splice(0).reverse()) await item.close();
  });
  const database = async () => {
    const db = await migratedDatabase(dialect);
    open.push(db);
    return db;
  };
  const source = (name: string) => new t.LinesWatcher({ path: `/tmp/${name}.log`, batch: 10 });

  it('identical watchers of two DAGs are one row, a queue of their own another; a batch is written by its owner only, an event delivered again makes no second run', async () => {
    const db = await database();
    const storage = openStores(db);
    await processWatchingDags(db, [
      { dagId: 'a', watch: source('orders') },
      { dagId: 'b', watch: source('orders') },
      { dagId: 'c', watch: source('orders'), queue: 'io' },
    ]);
    const rows = await db.db.selectFrom('trigger').select(['id', 'queue', 'watcher']).orderBy('id').execute();
    expect(rows.map((row) => [row.queue, row.watcher])).toEqual([
      ['default', 1],
      ['io', 1],
    ]);
    const links = await db.db.selectFrom('dag_watcher').select(['dag_id', 'trigger_id']).orderBy('dag_id').execute();
    expect(links).toEqual([
      { dag_id: 'a', trigger_id: rows[0]!.id },
      { dag_id: 'b', trigger_id: rows[0]!.id },
      { dag_id: 'c', trigger_id: rows[1]!.id },
    ]);

    const batch = (keys: string[], cursor: number) => ({
      triggerId: rows[0]!.id,
      classpath: 'test.LinesWatcher',
      events: keys.map((key) => ({ key, payloadJson: JSON.stringify({ key }) })),
      cursorJson: JSON.stringify(cursor),
    });
    const owner = await storage.jobs.registerJob({ jobType: 'TriggererJob', hostname: 'h', pid: 1, capacity: 10 });
    // Not claimed yet: nothing written.
    expect(await storage.triggers.recordWatchEvents(batch(['m1'], 1), owner)).toEqual({ kind: 'lost' });
    expect((await storage.triggers.claimTriggers(owner, 10)).claimed).toBe(1);
    expect(await storage.triggers.recordWatchEvents(batch(['m1', 'm2'], 2), owner)).toEqual({ kind: 'written', runs: 4 });
    // m2 again (delivered again after a crash), and m3: one new run per DAG.
    expect(await storage.triggers.recordWatchEvents(batch(['m2', 'm3'], 3), owner)).toEqual({ kind: 'written', runs: 2 });
    const runs = await db.db.selectFrom('dag_run').select(['dag_id', 'run_id', 'logical_date']).orderBy('dag_id').orderBy('run_id').execute();
    expect(runs.map((run) => `${run.dag_id}:${run.run_id}`)).toEqual([
      'a:event__m1',
      'a:event__m2',
      'a:event__m3',
      'b:event__m1',
      'b:event__m2',
      'b:event__m3',
    ]);
    expect(JSON.parse((await db.db.selectFrom('trigger').select('cursor').where('id', '=', rows[0]!.id).executeTakeFirstOrThrow()).cursor!)).toBe(3);
    // Another owner (it took the watcher over): this one's late batch writes nothing.
    const peer = await storage.jobs.registerJob({ jobType: 'TriggererJob', hostname: 'h', pid: 2, capacity: 10 });
    await db.db.updateTable('trigger').set({ triggerer_id: peer }).where('id', '=', rows[0]!.id).execute();
    expect(await storage.triggers.recordWatchEvents(batch(['m4'], 4), owner)).toEqual({ kind: 'lost' });
    expect(await db.db.selectFrom('dag_run').select('run_id').where('run_id', '=', 'event__m4').execute()).toEqual([]);

    // b stops watching: its link goes. c is deleted: its link and row stay (it may come back), released.
    await db.db.updateTable('trigger').set({ triggerer_id: peer }).execute();
    await db.db.updateTable('serialized_dag').set({ deleted_at: new Date().toISOString() }).where('dag_id', '=', 'c').execute();
    await processWatchingDags(db, [{ dagId: 'b', watch: null }], ['c']);
    expect(await db.db.selectFrom('dag_watcher').select('dag_id').orderBy('dag_id').execute()).toEqual([{ dag_id: 'a' }, { dag_id: 'c' }]);
    expect(await db.db.selectFrom('trigger').select(['id', 'triggerer_id']).orderBy('id').execute()).toEqual([
      { id: rows[0]!.id, triggerer_id: peer },
      { id: rows[1]!.id, triggerer_id: null },
    ]);
    // Paused, a: its watcher is released and unclaimable; unpaused, claimable again.
    expect(await storage.serializedDags.setDagPaused('a', true)).toBe(true);
    expect((await db.db.selectFrom('trigger').select('triggerer_id').where('id', '=', rows[0]!.id).executeTakeFirstOrThrow()).triggerer_id).toBeNull();
    expect((await storage.triggers.claimTriggers(owner, 10)).claimed).toBe(0);
    expect(await storage.serializedDags.setDagPaused('a', false)).toBe(true);
    expect((await storage.triggers.claimTriggers(owner, 10)).claimed).toBe(1);
    expect(await storage.serializedDags.setDagPaused('nope', true)).toBe(false);
  });

  it('a failing watcher is logged and run again after a growing backoff, failing nothing; a wait that yields WatchEvents fails its task instance', async () => {
    const db = await database();
    await processWatchingDags(db, [
      { dagId: 'broken', watch: new t.ThrowingTrigger({ tag: 'the source is down' }) },
      // A class this triggerer does not allow: it cannot even be built.
      { dagId: 'unknown', watch: new t.UnregisteredTrigger({}) },
    ]);
    const waiting = await createTaskInstance(db);
    await openStores(db).taskInstances.deferTaskInstance(waiting, new TaskDeferred({ trigger: new t.YieldsWatchEventsTrigger({}), method: 'resume' }));
    const tr = await startTriggerer(db);
    open.push({ close: () => tr.stop() });
    const failures = () => tr.logs.lines.filter((line) => typeof line.msg === 'string' && line.msg.startsWith('watcher ') && line.msg.includes('failed'));
    await waitFor(() => failures().filter((line) => line.classpath === 'test.ThrowingTrigger').length >= 2, {
      what: 'the watcher failing twice',
      timeoutMs: 15_000,
    });
    expect(failures().find((line) => line.classpath === 'test.ThrowingTrigger')!.msg).toMatch(
      /^watcher \d+ \(test\.ThrowingTrigger\) failed: .*the source is down; it runs again in 2 s from its cursor$/,
    );
    expect(failures().find((line) => line.classpath === 'test.ThrowingTrigger' && line.retry_in_ms === 4_000)).toBeDefined();
    expect(failures().find((line) => line.classpath === 'test.NotAllowedTrigger')?.msg).toMatch(/runs again in 2 s from its cursor$/);
    // Its row stays, owned: it is the DAG's watcher still.
    expect(await db.db.selectFrom('trigger').select('watcher').where('classpath', '=', 'test.ThrowingTrigger').execute()).toEqual([{ watcher: 1 }]);
    await waitFor(async () => (await taskInstance(db, waiting)).next_method === '__fail__', { what: 'the wait to fail' });
    expect(JSON.stringify((await taskInstance(db, waiting)).next_kwargs)).toContain('it runs as a wait (a task deferred on it), not as a watcher');
  });
});
