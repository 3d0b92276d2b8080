// Watchers as a user runs them: DAG files scheduled on a watcher (one trigger row for two DAGs
// watching the same source), `dags reserialize` making the watcher, a triggerer process running
// it: each event one run of each DAG, run id from the event's key. Exactly once: a triggerer
// SIGKILLed at random points while 10,000 events flow, started again each time, leaves exactly
// 10,000 runs, their cursor at the end of the source. A DAG that stops watching stops the watcher.
import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { countRows, waitFor } from '../support/fixtures.ts';
import { processScratch } from '../support/process-scratch.ts';
import { PACKAGE_ENTRY, REPO_ROOT, spawnDeferflow, spawnTriggerer, stopCleanly, type TriggererProcess } from '../support/processes.ts';
import { sharedBrowser } from '../support/shared-browser.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();
const browser = sharedBrowser();
const TEST_TRIGGERS = path.join(REPO_ROOT, 'test/fixtures/test-triggers.ts');

const watchingDag = (dagId: string, source: string, acks: string) => `
import { BaseOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
import { LinesWatcher } from ${JSON.stringify(TEST_TRIGGERS)};
class Handle extends BaseOperator { execute() { return 'handled'; } }
export const dag = new Dag({ dagId: ${JSON.stringify(dagId)}, schedule: { watch: new LinesWatcher({ path: ${JSON.stringify(source)}, acks: ${JSON.stringify(acks)}, batch: 250, pollMs: 20 }) } });
dag.add(new Handle({ taskId: 'handle' }));
`;

const lines = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => `order-${from + i} ${JSON.stringify({ order: from + i })}\n`).join('');

describe.each(testDialects)('watchers on %s', (dialect) => {
  it('two DAGs watching one source: one trigger row, one run of each per event, its key the run id; a DAG that stops watching stops it', async () => {
    const db = await scratch.database(dialect);
    const dags = scratch.dir('watchers');
    const source = path.join(dags, 'orders.log');
    const acks = path.join(dags, 'acks.log');
    writeFileSync(source, lines(0, 3));
    writeFileSync(path.join(dags, 'billing.mts'), watchingDag('billing', source, acks));
    writeFileSync(path.join(dags, 'shipping.mts'), watchingDag('shipping', source, acks));
    expect(await spawnDeferflow(['dags', 'reserialize', '--db', db.url, '--dags', dags]).exitWithin()).toEqual({ code: 0, signal: null });
    const watchers = await db.db.selectFrom('trigger').select(['id', 'classpath', 'watcher', 'triggerer_id']).execute();
    expect(watchers).toEqual([{ id: watchers[0]!.id, classpath: 'test.LinesWatcher', watcher: 1, triggerer_id: null }]);

    const triggerer = spawnTriggerer([
      '--db',
      db.url,
      '--trigger-module',
      'test/fixtures/test-triggers.ts',
      '--poll-interval',
      '0.2',
      '--heartbeat-interval',
      '0.5',
    ]);
    await triggerer.waitForJob(20_000);
    const runs = () => db.db.selectFrom('dag_run').select(['dag_id', 'run_id', 'run_type', 'conf']).orderBy('dag_id').orderBy('run_id').execute();
    await waitFor(async () => (await runs()).length === 6, { what: 'one run of each DAG per event', timeoutMs: 20_000 });
    appendFileSync(source, lines(3, 5));
    await waitFor(async () => (await runs()).length === 10, { what: 'the runs of the events appended', timeoutMs: 20_000 });
    const made = await runs();
    expect(made.map((run) => `${run.dag_id} ${run.run_id} ${run.run_type}`)).toEqual(
      ['billing', 'shipping'].flatMap((dagId) => [0, 1, 2, 3, 4].map((i) => `${dagId} event__order-${i} event`)),
    );
    expect(JSON.parse(made[0]!.conf)).toEqual({
      event: { key: 'order-0', payload: { order: 0 }, trigger: { id: watchers[0]!.id, classpath: 'test.LinesWatcher' } },
    });
    // Each task instance of those runs exists, waiting for a scheduler.
    expect(
      Number(
        (
          await db.db
            .selectFrom('task_instance')
            .select((eb) => eb.fn.countAll().as('n'))
            .executeTakeFirstOrThrow()
        ).n,
      ),
    ).toBe(10);
    const row = await db.db.selectFrom('trigger').select(['cursor', 'triggerer_id']).executeTakeFirstOrThrow();
    expect(JSON.parse(row.cursor!)).toBe(5);
    // Acknowledged after the commits only, in order.
    expect(readFileSync(acks, 'utf8').trim().split('\n').map(Number).at(-1)).toBe(5);

    // What a user sees: `dags list` and the DAG's page name the watcher, its owner and cursor.
    const list = spawnDeferflow(['dags', 'list', '--db', db.url, '--json']);
    expect(await list.exitWithin()).toEqual({ code: 0, signal: null });
    const listed = JSON.parse(list.text.join('\n')) as { dags: { dag_id: string; schedule: string }[]; watchers: Record<string, unknown>[] };
    expect(listed.dags.map((dag) => dag.schedule)).toEqual(['watch test.LinesWatcher', 'watch test.LinesWatcher']);
    expect(listed.watchers).toEqual(
      ['billing', 'shipping'].map((dagId) =>
        expect.objectContaining({
          dag_id: dagId,
          trigger_id: watchers[0]!.id,
          classpath: 'test.LinesWatcher',
          queue: 'default',
          triggerer_id: row.triggerer_id,
          cursor: 5,
          event_filters: null,
        }),
      ),
    );
    const web = spawnDeferflow(['web', '--db', db.url, '--http-port', '0']);
    const page = await browser().newPage();
    try {
      await page.goto(`${await web.waitForStatusPage()}/dags/billing`);
      const watcherRow = await page.locator(`#watchers tr[data-trigger="${watchers[0]!.id}"]`).textContent();
      expect(watcherRow).toContain('test.LinesWatcher');
      expect(watcherRow).toContain(String(row.triggerer_id));
      expect(await page.locator(`#watchers tr[data-trigger="${watchers[0]!.id}"] .event-filters`).textContent()).toBe('all');
      expect(await page.locator('#runs').textContent()).toContain('event__order-4');
    } finally {
      await page.close();
      await stopCleanly([web]);
    }

    // Paused, both: the watcher stops (its row and cursor kept), and no event makes a run meanwhile.
    const pause = async (verb: string, dagId: string) => {
      const cli = spawnDeferflow(['dags', verb, dagId, '--db', db.url]);
      expect(await cli.exitWithin()).toEqual({ code: 0, signal: null });
      expect(cli.text).toEqual([`DAG ${dagId} ${verb}d`]);
    };
    await pause('pause', 'billing');
    await pause('pause', 'shipping');
    const released = await triggerer.waitForLine((line) => line.trigger_id === watchers[0]!.id && String(line.msg).includes('no longer ours'), 20_000);
    expect(released.killed).toBe(false);
    expect(await db.db.selectFrom('trigger').select(['triggerer_id', 'cursor']).execute()).toEqual([{ triggerer_id: null, cursor: '5' }]);
    appendFileSync(source, lines(5, 6));
    const unknown = spawnDeferflow(['dags', 'pause', 'biling', '--db', db.url]);
    expect((await unknown.exitWithin()).code).toBe(2);
    expect(unknown.stderr.join('\n')).toContain('billing');
    // Unpaused: claimed again, from its cursor: order-5 only.
    await pause('unpause', 'shipping');
    await waitFor(async () => (await runs()).length === 11, { what: "order-5's run", timeoutMs: 20_000 });
    expect((await runs()).filter((run) => run.run_id === 'event__order-5').map((run) => run.dag_id)).toEqual(['shipping']);
    await pause('unpause', 'billing');

    // billing stops watching (its link goes); shipping is deleted (its link stays, for when it comes
    // back, but a deleted DAG runs nothing): the watcher is released and its triggerer stops it.
    await waitFor(async () => (await db.db.selectFrom('trigger').select('triggerer_id').executeTakeFirstOrThrow()).triggerer_id !== null, {
      what: 'the watcher claimed again',
    });
    const stops = () => triggerer.matching((line) => line.trigger_id === watchers[0]!.id && String(line.msg).includes('no longer ours')).length;
    expect(stops()).toBe(1);
    writeFileSync(path.join(dags, 'billing.mts'), `import { Dag } from ${JSON.stringify(PACKAGE_ENTRY)};\nexport const dag = new Dag({ dagId: 'billing' });\n`);
    writeFileSync(path.join(dags, 'shipping.mts'), `export {};\n`);
    expect(await spawnDeferflow(['dags', 'reserialize', '--db', db.url, '--dags', dags]).exitWithin()).toEqual({ code: 0, signal: null });
    expect(await db.db.selectFrom('dag_watcher').select('dag_id').execute()).toEqual([{ dag_id: 'shipping' }]);
    await waitFor(() => stops() === 2, { what: 'the watcher stopped again', timeoutMs: 20_000 });
    expect(await db.db.selectFrom('trigger').select(['triggerer_id', 'cursor']).execute()).toEqual([{ triggerer_id: null, cursor: '6' }]);
    await stopCleanly([triggerer]);
    expect((await runs()).length).toBe(11);
  }, 90_000);

  it('10,000 events with the triggerer SIGKILLed at random points and started again: exactly 10,000 runs', async () => {
    const db = await scratch.database(dialect);
    const dags = scratch.dir('watchers');
    const source = path.join(dags, 'orders.log');
    const acks = path.join(dags, 'acks.log');
    const total = 10_000;
    const chunk = total / 5;
    writeFileSync(source, '');
    writeFileSync(path.join(dags, 'orders.mts'), watchingDag('orders', source, acks));
    expect(await spawnDeferflow(['dags', 'reserialize', '--db', db.url, '--dags', dags]).exitWithin()).toEqual({ code: 0, signal: null });
    const count = () => countRows(db, 'dag_run');
    const start = () =>
      spawnTriggerer(['--db', db.url, '--trigger-module', 'test/fixtures/test-triggers.ts', '--poll-interval', '0.2', '--heartbeat-interval', '0.5']);
    let triggerer: TriggererProcess = start();
    // The events flow in five parts; within each, the triggerer is SIGKILLed at a random point
    // (mid-batch, or having caught up), then started again.
    for (let part = 0; part < 5; part++) {
      appendFileSync(source, lines(part * chunk, (part + 1) * chunk));
      const target = part * chunk + 1 + Math.floor(Math.random() * chunk);
      await waitFor(async () => (await count()) >= target, { what: `runs past ${target}`, timeoutMs: 60_000 });
      triggerer.kill('SIGKILL');
      await triggerer.exitWithin();
      triggerer = start();
    }
    await waitFor(async () => (await count()) === total, { what: `all ${total} runs`, timeoutMs: 120_000 });
    await waitFor(async () => JSON.parse((await db.db.selectFrom('trigger').select('cursor').executeTakeFirstOrThrow()).cursor ?? '0') === total, {
      what: 'the cursor at the end of the source',
    });
    // The last one may have had nothing left to do: SIGTERM before it has started (its handler not
    // yet installed) would end it by the signal, not by a clean stop.
    await triggerer.waitForJob(30_000);
    await stopCleanly([triggerer]);
    const runIds = await db.db.selectFrom('dag_run').select('run_id').execute();
    expect(runIds.length).toBe(total);
    expect(new Set(runIds.map((run) => run.run_id)).size).toBe(total);
  }, 240_000);
});
