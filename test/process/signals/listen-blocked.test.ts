// LISTEN/NOTIFY that cannot work, as behind a transaction-mode pooler: a proxy between a
// triggerer and PostgreSQL passes every message but the notifications. The triggerer must say so
// once, and keep finding its work by polling at its own interval (not the slower safety net it
// uses while pushes arrive).
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { processDagFolder } from '../../../src/services/dags/dag-processor.ts';
import { triggerDagRun } from '../../../src/services/dags/manual-run.ts';
import { dropTestDatabases } from '../../support/databases.ts';
import { waitFor } from '../../support/fixtures.ts';
import { PACKAGE_ENTRY, PACKAGE_TRIGGERS, spawnDeferflow, spawnTriggerer, type TriggererProcess, stopCleanly } from '../../support/processes.ts';
import { processScratch } from '../../support/process-scratch.ts';
import { postgresProxy } from '../../support/postgres-proxy.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

const DAG = `import { BaseOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
import { TimeDeltaTrigger } from ${JSON.stringify(PACKAGE_TRIGGERS)};
class Nap extends BaseOperator {
  execute() { return this.defer({ trigger: new TimeDeltaTrigger({ delta: 0.2 }), method: 'done' }); }
  done() { return 'rested'; }
}
export const dag = new Dag({ dagId: 'nap' }).add(new Nap({ taskId: 'nap' }));
`;

const started = (proc: TriggererProcess) => proc.waitForJob(20_000);

describe('LISTEN that cannot work, on postgres', () => {
  it('is warned about once, and the triggerer keeps polling at its own interval', async () => {
    const db = await scratch.database('postgres');
    const proxy = await postgresProxy(db.url, { dropNotifications: true });
    try {
      const dags = scratch.dir('listen-blocked');
      writeFileSync(path.join(dags, 'nap.mjs'), DAG);
      await processDagFolder(db, dags);
      const triggerer = spawnTriggerer(['--db', proxy.url, '--poll-interval', '1']);
      const others = [
        spawnDeferflow(['scheduler', '--db', db.url, '--poll-interval', '0.2']),
        spawnDeferflow(['worker', '--db', db.url, '--dags', dags, '--poll-interval', '0.2']),
      ];
      for (const proc of [triggerer, ...others]) await started(proc);
      // The probe is not heard within its 5 s: the warning.
      const warning = await triggerer.waitForLine((line) => String(line.msg).includes('LISTEN/NOTIFY does not reach this process'), 20_000);
      expect(warning.level).toBe(40);
      expect(proxy.dropped()).toBeGreaterThan(0);

      // A deferral pushes a NOTIFY the triggerer never hears; its 1 s poll claims the trigger.
      const startedAt = Date.now();
      const runId = await triggerDagRun(db, 'nap');
      await waitFor(async () => (await db.db.selectFrom('dag_run').select('state').where('run_id', '=', runId).executeTakeFirstOrThrow()).state === 'success', {
        what: 'the run done by polling',
        timeoutMs: 20_000,
      });
      // Far inside the 10 s safety net the triggerer would wait if it trusted pushes.
      expect(Date.now() - startedAt).toBeLessThan(7_000);
      await stopCleanly([triggerer, ...others]);
      expect(triggerer.lines.filter((line) => String(line.msg).includes('LISTEN/NOTIFY does not reach this process'))).toHaveLength(1);
    } finally {
      proxy.close();
    }
  }, 60_000);
});
