// Bad flags through the binaries (fast-check): any flag of a daemon command, or a mistyped one,
// with any value. A refusal exits 2 naming the flag; a value that is valid starts the daemon,
// which stops cleanly on SIGTERM. Either way the work in the database is untouched: a mistyped
// flag never deletes or fails anything.
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { deferTaskInstance, TaskDeferred } from '../../../src/index.ts';
import { TRIGGERER_OPTIONS } from '../../../src/internals.ts';
import { SCHEDULER_OPTIONS } from '../../../src/daemons/scheduler/options.ts';
import { WORKER_OPTIONS } from '../../../src/daemons/worker/options.ts';
import { flagOf } from '../../../src/vocabulary/options/option-table.ts';
import { DateTimeTrigger } from '../../../triggers/index.ts';
import { dropTestDatabases } from '../../support/databases.ts';
import { createTaskInstance, type TestDatabase } from '../../support/fixtures.ts';
import { processScratch } from '../../support/process-scratch.ts';
import { REPO_ROOT, TriggererProcess } from '../../support/processes.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

const COMMANDS = {
  triggerer: TRIGGERER_OPTIONS,
  worker: WORKER_OPTIONS,
  scheduler: SCHEDULER_OPTIONS,
} as const;
/** --db is the database under test itself. */
const flagsOf = (command: keyof typeof COMMANDS) =>
  Object.entries(COMMANDS[command])
    .map(([field, spec]) => flagOf(field, spec))
    .filter((flag) => flag !== 'db');

const value = fc.oneof(
  fc.string({ maxLength: 12 }),
  fc.integer({ min: -100_000, max: 100_000 }).map(String),
  fc.double({ noNaN: false }).map(String),
  fc.constantFrom('', ' ', '0', '-1', '1e3', '2.0', 'NaN', 'true', 'off', '0x10', '9999999999', '../nowhere', '\u00e9\u{1F600}'),
);
/** Not a flag of any command: yargs' own (help, version) and negations (--no-push) excluded. */
const mistyped = fc.stringMatching(/^[a-z][a-z-]{1,14}[a-z]$/).filter((name) => !['help', 'version'].includes(name) && !name.startsWith('no-'));

/** What the work looks like to a user: the task instances and the trigger they wait on (not its owner, a started triggerer's to take). */
async function work(db: TestDatabase) {
  return {
    taskInstances: await db.db
      .selectFrom('task_instance')
      .select(['id', 'state', 'try_number', 'next_method', 'next_kwargs', 'trigger_id'])
      .orderBy('id')
      .execute(),
    triggers: await db.db.selectFrom('trigger').select(['id', 'classpath', 'kwargs']).orderBy('id').execute(),
    runs: await db.db.selectFrom('dag_run').select(['id', 'state']).orderBy('id').execute(),
  };
}

describe('daemon flags through the binaries', () => {
  it('any flag with any value, or a mistyped flag: refused with exit 2 naming it, or a daemon that stops cleanly; the work is untouched', async () => {
    const db = await scratch.database('sqlite');
    const cwd = scratch.dir('cli-flags');
    // The worker's default DAG folder, empty: a worker given good flags starts.
    mkdirSync(path.join(cwd, 'dags'));
    // A task instance waiting on a trigger due in a year: a daemon that does start finds nothing to do.
    const id = await createTaskInstance(db, { dagId: 'kept', taskId: 'waits' });
    await deferTaskInstance(db, id, new TaskDeferred({ trigger: new DateTimeTrigger({ moment: new Date(Date.now() + 365 * 86_400_000) }), method: 'resume' }));
    const before = await work(db);

    await fc.assert(
      fc.asyncProperty(
        fc
          .constantFrom(...(Object.keys(COMMANDS) as (keyof typeof COMMANDS)[]))
          .chain((command) => fc.tuple(fc.constant(command), fc.oneof(fc.constantFrom(...flagsOf(command)), mistyped), value)),
        async ([command, flag, given]) => {
          // A folder that exists is a DAG folder a worker loads, not bad input (and '/' would be all of them).
          fc.pre(!(flag === 'dags' && existsSync(path.resolve(cwd, given))));
          const known = flagsOf(command).includes(flag) || flag === 'db';
          const defaults = [
            ['poll-interval', '0.2'],
            ['log-level', 'info'],
          ].flatMap(([name, setting]) => (name === flag ? [] : [`--${name}`, setting!]));
          const args = [command, '--db', db.url, ...defaults, `--${flag}=${given}`];
          const proc = new TriggererProcess(args, { DEFERFLOW_TASK_ISOLATION: 'none' }, path.join(REPO_ROOT, 'bin/deferflow.js'), cwd);
          // Refused (exited), or running: registered its job, or still up after a while (a log level that hides the line).
          const exitedAtOnce = await Promise.race([
            proc.exit.then(() => true),
            proc.waitForJob(10_000).then(
              () => false,
              () => proc.exited !== null,
            ),
          ]);
          const where = `deferflow ${command} --${flag}=${JSON.stringify(given)}:\n${proc.describe()}`;
          if (!exitedAtOnce) {
            expect(known, where).toBe(true);
            proc.kill('SIGTERM');
            expect((await proc.exit).code, where).toBe(0);
          } else {
            const exit = await proc.exit;
            expect(exit.code, where).toBe(2);
            const stderr = proc.stderr.join('\n');
            if (known) expect(stderr, where).toMatch(new RegExp(`^error \\[DF_[A-Z_]+\\]: .*${flag.split('-')[0]}`, 'm'));
            else expect(stderr, where).toMatch(new RegExp(`^error: Unknown arguments?: (.*, )?${flag}(,|$)`, 'm'));
          }
          expect(await work(db), where).toEqual(before);
        },
      ),
      { numRuns: 24 },
    );
  }, 240_000);
});
