// A trigger that throws, in a user's TypeScript file that a DAG file imports too: the failure
// names the user's file, line and column (not a line of the other compilation of that file), and
// the failed task shows the trigger's own stack, with deferflow's frames left out, in `tasks
// logs`, `tasks list --json` and the status page's log page in Chromium.
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { sharedBrowser } from '../support/shared-browser.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { processScratch } from '../support/process-scratch.ts';
import { PACKAGE_ENTRY, spawnDeferflow, stopCleanly } from '../support/processes.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

const browser = sharedBrowser();

// The throw is on line 11, column 11; the class's closing brace on line 13.
const TRIGGER = `import { BaseTrigger, TriggerEvent, type SerializedTrigger } from ${JSON.stringify(PACKAGE_ENTRY)};

export class BoomTrigger extends BaseTrigger {
  static readonly classpath = 'project.BoomTrigger';
  serialize(): SerializedTrigger {
    return { classpath: BoomTrigger.classpath, kwargs: {} };
  }
  async *run(): AsyncGenerator<TriggerEvent<string>> {
    const typed: number = 1;
    await this.sleep(typed);
    throw new Error('the sensor is unplugged');
  }
}
`;

const DAG = `import { BaseOperator, Dag, type RuntimeContext } from ${JSON.stringify(PACKAGE_ENTRY)};
import { BoomTrigger } from '../triggers/boom.ts';

class WaitsForBoom extends BaseOperator<RuntimeContext> {
  execute(): never {
    return this.defer({ trigger: new BoomTrigger(), method: 'done' });
  }
  done(): string {
    return 'never';
  }
}
export const dag = new Dag({ dagId: 'boom' }).add(new WaitsForBoom({ taskId: 'wait' }));
`;

describe.each(testDialects)('a failed trigger in a user module on %s', (dialect) => {
  it("is reported at the user's line, and its task shows the trigger's own stack in tasks logs, tasks list --json and the status page", async () => {
    const db = await scratch.database(dialect);
    const project = scratch.dir('trigger-stack');
    mkdirSync(path.join(project, 'dags'));
    mkdirSync(path.join(project, 'triggers'));
    const triggerFile = path.join(project, 'triggers', 'boom.ts');
    writeFileSync(triggerFile, TRIGGER);
    writeFileSync(path.join(project, 'dags', 'boom.ts'), DAG);
    const where = `at BoomTrigger.run (${triggerFile}:11:11)`;

    const standalone = spawnDeferflow(
      ['standalone', '--db', db.url, '--dags', './dags', '--trigger-module', './triggers/boom.ts', '--trigger-dag', 'boom', '--exit-when-done'],
      {},
      project,
    );
    const exit = await standalone.exitWithin(60_000);
    expect(exit.code, standalone.describe()).toBe(1);
    const triggererLine = standalone.stderr
      .flatMap((line) => {
        try {
          return [JSON.parse(line) as Record<string, unknown>];
        } catch {
          return []; // not a log line (a warning of Node's, say)
        }
      })
      .find((line) => line.code === 'DF_TRIGGER_FAILED');
    expect(triggererLine?.traceback).toBe(`Error: the sensor is unplugged\n    ${where}`);
    const runId = /boom (manual__\S+): failed/.exec(standalone.text.join('\n'))?.[1];
    expect(runId).toBeDefined();

    const logs = spawnDeferflow(['tasks', 'logs', '--db', db.url, '--run', runId!, '--task', 'wait']);
    expect((await logs.exit).code).toBe(0);
    const printed = logs.text.join('\n');
    expect(printed).toContain('failed: TaskDeferralError: the trigger failed [DF_TRIGGER_FAILED]: Error: the sensor is unplugged');
    expect(printed).toContain(`    TaskDeferralError: the trigger failed [DF_TRIGGER_FAILED]: Error: the sensor is unplugged\n        ${where}`);
    expect(printed).not.toContain('base-operator');

    const list = spawnDeferflow(['tasks', 'list', '--db', db.url, '--run', runId!, '--json']);
    expect((await list.exit).code).toBe(0);
    const [row] = JSON.parse(list.text.join('\n')) as { task_id: string; state: string; error: { code: string; error: string; traceback: string } | null }[];
    expect(row).toMatchObject({
      task_id: 'wait',
      state: 'failed',
      error: {
        code: 'DF_TASK_DEFERRAL',
        error: 'TaskDeferralError: the trigger failed [DF_TRIGGER_FAILED]: Error: the sensor is unplugged',
        traceback: `TaskDeferralError: the trigger failed [DF_TRIGGER_FAILED]: Error: the sensor is unplugged\n    ${where}`,
      },
    });

    const web = spawnDeferflow(['web', '--db', db.url, '--http-port', '0']);
    const base = await web.waitForStatusPage();
    const page = await browser().newPage();
    try {
      // The DAG page lists the run; the run page links each task instance's log.
      await page.goto(`${base}/dags/boom`);
      await page.locator('#runs a', { hasText: runId! }).click();
      await page.locator('#task-instances tr[data-task="wait"] a', { hasText: 'log' }).click();
      const log = page.locator('#log');
      await log.waitFor();
      expect(await log.textContent()).toContain(where);
    } finally {
      await page.close();
    }
    await stopCleanly([web]);
  }, 120_000);
});
