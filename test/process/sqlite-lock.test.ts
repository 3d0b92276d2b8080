// SQLite locked by another writer for 10 s while every daemon runs: they wait (busy timeout) and
// retry, nothing is lost, nothing crashes, and every task instance moves once. And the wait for
// the lock happens on the event loop, not in a synchronous busy handler that freezes it.
import { writeFileSync } from 'node:fs';
import { sql } from 'kysely';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { processDagFolder } from '../../src/services/dags/dag-processor.ts';
import { triggerDagRun } from '../../src/services/dags/manual-run.ts';
import { dropTestDatabases } from '../support/databases.ts';
import { waitFor } from '../support/fixtures.ts';
import { processScratch } from '../support/process-scratch.ts';
import { PACKAGE_ENTRY, PACKAGE_TRIGGERS, spawnDeferflow, spawnTriggerer, stopCleanly } from '../support/processes.ts';
import { whileLocked } from '../support/sqlite-lock.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

const RUNS = 4;
const LOCK_MS = 10_000;
/** From the runs' creation to their triggers' moment: time to defer and be claimed first. */
const LEAD_MS = 12_000;
/** The moment comes 2 s into the lock: its event's write waits out the 5 s busy timeout, fails, and is retried. */
const LOCK_BEFORE_MOMENT_MS = 2_000;

describe('a statement waiting for the SQLite write lock', () => {
  it('leaves the event loop free meanwhile, and goes through once the other writer lets go', async () => {
    const db = await scratch.database('sqlite');
    let ticks = 0;
    const ticker = setInterval(() => ticks++, 5);
    try {
      let settled = false;
      let write: Promise<unknown> = Promise.resolve();
      await whileLocked(db, async () => {
        // Outside a transaction, as the triggerer's claims on SQLite are; the lock is held by
        // another connection of this very process, so a synchronous wait could never end.
        write = sql`create table lock_probe (x integer)`.execute(db.db).finally(() => {
          settled = true;
        });
        write.catch(() => {});
        const ticksBefore = ticks;
        await waitFor(() => ticks >= ticksBefore + 5, { what: 'timers to run while the statement waits', timeoutMs: 4_000 });
        expect(settled, 'the statement ended while the lock was still held').toBe(false);
      });
      await write;
      expect(await db.adapter.hasTable(db.db, 'lock_probe')).toBe(true);
    } finally {
      clearInterval(ticker);
    }
  });
});

describe('SQLite locked for 10 s with a scheduler, a worker and a triggerer running', () => {
  it('they wait and retry; every run finishes once the lock is gone, each task in its first try, and no process exits', async () => {
    const db = await scratch.database('sqlite');
    const dags = scratch.dir('locked-dags');
    writeFileSync(
      path.join(dags, 'locked.mjs'),
      `import { BaseOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
import { DateTimeTrigger } from ${JSON.stringify(PACKAGE_TRIGGERS)};
class Wait extends BaseOperator {
  execute(context) { return this.defer({ trigger: new DateTimeTrigger({ moment: context.dagRun.conf.at }), method: 'resume' }); }
  resume(_context, event) { return 'waited'; }
}
class After extends BaseOperator {
  execute() { return 'after'; }
}
const wait = new Wait({ taskId: 'wait', retries: 2 });
const after = new After({ taskId: 'after', retries: 2 });
wait.before(after);
export const dag = new Dag({ dagId: 'locked' }).add(wait, after);
`,
    );
    await processDagFolder(db, dags);
    const fast = ['--poll-interval', '0.2', '--heartbeat-interval', '1'];
    const scheduler = spawnDeferflow(['scheduler', '--db', db.url, ...fast]);
    const worker = spawnDeferflow(['worker', '--db', db.url, '--dags', dags, ...fast]);
    const triggerer = spawnTriggerer(['--db', db.url, ...fast]);
    const daemons = { scheduler, worker, triggerer };
    await Promise.all(Object.values(daemons).map((daemon) => daemon.waitForJob(20_000)));

    const at = Date.now() + LEAD_MS;
    for (let i = 0; i < RUNS; i++) {
      await triggerDagRun(db, 'locked', {
        runId: `locked_${i}`,
        logicalDate: `2026-01-0${i + 1}T00:00:00Z`,
        conf: { at: new Date(at + i * 10).toISOString() },
      });
    }
    const states = async () => db.db.selectFrom('task_instance').select(['run_id', 'task_id', 'state', 'try_number']).execute();
    // Every wait deferred and its trigger running (each its own: the moments differ), due during the lock.
    await waitFor(async () => (await states()).filter((ti) => ti.task_id === 'wait' && ti.state === 'deferred').length === RUNS, {
      what: 'every wait deferred',
      timeoutMs: 30_000,
    });
    await waitFor(() => triggerer.lines.some((line) => line.running === RUNS), { what: 'the triggers running', timeoutMs: 20_000 });
    await new Promise((resolve) => setTimeout(resolve, at - LOCK_BEFORE_MOMENT_MS - Date.now()));
    const lockedAt = Date.now();
    // The precondition of what follows: the triggers fire while the file is locked.
    expect(lockedAt).toBeLessThan(at);
    await whileLocked(db, async () => {
      await new Promise((resolve) => setTimeout(resolve, LOCK_MS));
    });
    const lockedFor = Date.now() - lockedAt;
    expect(lockedFor).toBeGreaterThanOrEqual(LOCK_MS);

    // The triggers fired during the lock: their events are written once it is gone.
    await waitFor(async () => (await db.db.selectFrom('dag_run').select('state').where('state', '=', 'success').execute()).length === RUNS, {
      what: 'every run finished after the lock',
      timeoutMs: 90_000,
    });
    const tis = await states();
    expect(tis).toHaveLength(RUNS * 2);
    for (const ti of tis) expect(ti, `${ti.run_id}.${ti.task_id}`).toMatchObject({ state: 'success', try_number: 1 });
    // Each wait deferred once and resumed once: one trigger wait per task instance, none failed.
    const waits = await db.db.selectFrom('trigger_wait').select(['task_instance_id']).execute();
    expect(waits).toHaveLength(RUNS);
    // Each met the lock: some statement of each waited out the busy timeout and failed, was
    // reported, and was retried. (Which statement that is, and whether the triggerer's event
    // write is one or only waits out the rest of the lock, depends on timing.)
    for (const [name, daemon] of Object.entries(daemons)) {
      const reported = daemon.lines.filter((line) => Number(line.level) >= 40 && JSON.stringify(line).includes('database is locked'));
      expect(
        reported.length,
        `${name} reported the lock: ${JSON.stringify(daemon.lines.filter((line) => Number(line.level) >= 40).map((line) => line.msg))}`,
      ).toBeGreaterThan(0);
    }
    for (const [name, daemon] of Object.entries(daemons)) expect(daemon.exited, `${name} exited`).toBeNull();
    await stopCleanly(Object.values(daemons));
  }, 180_000);
});
