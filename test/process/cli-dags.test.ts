// `deferflow dags list | trigger | runs` as users run them.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { processDagFolder } from '../../src/services/dags/dag-processor.ts';
import { toDbTime } from '../../src/database/schema.ts';
import { triggerDagRun } from '../../src/services/dags/manual-run.ts';
import { processScratch } from '../support/process-scratch.ts';
import { dropTestDatabases, oneDialect } from '../support/databases.ts';
import { PACKAGE_ENTRY, spawnDeferflow, type TriggererProcess } from '../support/processes.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

const DAGS = `
import { Dag, FunctionOperator } from ${JSON.stringify(PACKAGE_ENTRY)};
export const nightly = new Dag({ dagId: 'nightly', schedule: '0 2 * * *', timezone: 'Europe/Amsterdam', startDate: '2026-01-01T00:00:00Z' })
  .add(new FunctionOperator({ taskId: 'work', fn: () => 1 }));
export const adhoc = new Dag({ dagId: 'adhoc' }).add(new FunctionOperator({ taskId: 'work', fn: () => 1 }));
`;

const run = async (proc: TriggererProcess) => ({ exit: await proc.exit, out: proc.text, err: proc.stderr.join('\n') });

// What differs between dialects (runs listed, manual runs refused or moved, DAG processing) is
// tested on each in test/unit (listings, dag-processing); the commands run on one.
describe.each(oneDialect)('deferflow dags on %s', (dialect) => {
  it('lists DAGs with their schedules, triggers runs, and lists runs newest first, filtered by DAG and state', async () => {
    const db = await scratch.database(dialect);
    const dir = scratch.dir('dags');
    writeFileSync(path.join(dir, 'dags.mts'), DAGS);
    await processDagFolder(db, dir);

    const listed = await run(spawnDeferflow(['dags', 'list', '--db', db.url]));
    expect(listed.exit.code).toBe(0);
    // A table with a header row, columns aligned.
    expect(listed.out).toEqual([
      'DAG ID   SCHEDULE                      PAUSED  FILE',
      `adhoc    manual                        no      ${path.join(dir, 'dags.mts')}`,
      `nightly  0 2 * * * (Europe/Amsterdam)  no      ${path.join(dir, 'dags.mts')}`,
    ]);
    // Paused, it says so; a DAG it does not have is refused, naming the closest it has.
    expect((await run(spawnDeferflow(['dags', 'pause', 'nightly', '--db', db.url]))).out).toEqual(['DAG nightly paused']);
    expect((await run(spawnDeferflow(['dags', 'list', '--db', db.url]))).out[2]).toMatch(/^nightly .* yes +\//);
    const unknown = await run(spawnDeferflow(['dags', 'unpause', 'nighty', '--db', db.url]));
    expect(unknown.exit.code).toBe(2);
    expect(unknown.err).toContain('nightly');
    expect((await run(spawnDeferflow(['dags', 'unpause', 'nightly', '--db', db.url]))).out).toEqual(['DAG nightly unpaused']);

    expect((await run(spawnDeferflow(['dags', 'trigger', 'adhoc', '--db', db.url, '--run-id', 'first']))).out).toEqual(['first']);
    expect((await run(spawnDeferflow(['dags', 'trigger', 'adhoc', '--db', db.url, '--run-id', 'second', '--conf', '{"n": 2}']))).out).toEqual(['second']);
    await db.db.updateTable('dag_run').set({ state: 'failed' }).where('run_id', '=', 'first').execute();

    const all = await run(spawnDeferflow(['dags', 'runs', '--db', db.url, '--json']));
    expect(all.exit.code).toBe(0);
    const rows = JSON.parse(all.out.join('\n')) as { dag_id: string; run_id: string; run_type: string; state: string; logical_date: string }[];
    expect(rows.map((row) => [row.dag_id, row.run_id, row.run_type, row.state])).toEqual([
      ['adhoc', 'second', 'manual', 'queued'],
      ['adhoc', 'first', 'manual', 'failed'],
    ]);
    expect(Date.parse(rows[0]!.logical_date)).toBeGreaterThanOrEqual(Date.parse(rows[1]!.logical_date));

    const failed = await run(spawnDeferflow(['dags', 'runs', 'adhoc', '--state', 'failed', '--db', db.url]));
    expect(failed.out).toHaveLength(2);
    expect(failed.out[0]).toMatch(/^DAG ID +RUN ID +TYPE +STATE +LOGICAL DATE +STARTED +ENDED$/);
    expect(failed.out[1]!.split(/ {2,}/).slice(0, 4)).toEqual(['adhoc', 'first', 'manual', 'failed']);
    expect((await run(spawnDeferflow(['dags', 'runs', 'nightly', '--db', db.url]))).out).toEqual(['no DAG runs of nightly']);
    // A DAG with neither runs nor a serialized DAG is a mistyped id, not an idle DAG.
    const mistyped = await run(spawnDeferflow(['dags', 'runs', 'nigthly', '--db', db.url]));
    expect(mistyped.exit.code).toBe(2);
    expect(mistyped.out).toEqual([]);
    expect(mistyped.err).toContain(
      'error [DF_INVALID_OPTION]: dag-id: no DAG "nigthly" among the serialized DAGs (did you mean nightly? see deferflow dags list)',
    );

    // Refused options.
    const badState = await run(spawnDeferflow(['dags', 'runs', '--state', 'sleeping', '--db', db.url]));
    expect(badState.exit.code).toBe(2);
    expect(badState.err).toContain('sleeping');
    const badLimit = await run(spawnDeferflow(['dags', 'runs', '--limit', 'ten', '--db', db.url]));
    expect(badLimit.exit.code).toBe(2);
    expect(badLimit.err).toContain('error [DF_INVALID_OPTION]: limit: expected a positive integer, got "ten"');
    // JSON, but not an object: said plainly, without claiming arrays could be stored.
    const arrayConf = await run(spawnDeferflow(['dags', 'trigger', 'adhoc', '--db', db.url, '--conf', '[1,2]']));
    expect(arrayConf.exit.code).toBe(2);
    expect(arrayConf.err).toContain('error [DF_NOT_JSON]: conf: expected a JSON object ({"key": value, ...}), got an array');
    expect(arrayConf.err).not.toContain('arrays');
    // A run at a given logical date (what an ExternalTaskSensor matches on), once per date.
    const dated = await run(spawnDeferflow(['dags', 'trigger', 'adhoc', '--db', db.url, '--logical-date', '2026-03-01T11:00:00+01:00']));
    expect(dated.out).toEqual(['manual__2026-03-01T10:00:00.000Z']);
    const again = await run(spawnDeferflow(['dags', 'trigger', 'adhoc', '--db', db.url, '--logical-date', '2026-03-01T10:00:00Z']));
    expect(again.exit.code).toBe(2);
    expect(again.err).toContain('logical-date: DAG adhoc already has a run manual__2026-03-01T10:00:00.000Z or a run at 2026-03-01T10:00:00.000Z');
    // Triggered in one millisecond with neither a date nor an id (calls made together, a script's
    // loop): each gets its run, the later ones at the next free millisecond.
    const together = await Promise.all([1, 2, 3].map(() => triggerDagRun(db, 'adhoc', {}, Date.parse('2026-04-01T00:00:00Z'))));
    expect(together.sort()).toEqual(['000', '001', '002'].map((ms) => `manual__2026-04-01T00:00:00.${ms}Z`));
    const naive = await run(spawnDeferflow(['dags', 'trigger', 'adhoc', '--db', db.url, '--logical-date', '2026-03-01 10:00']));
    expect(naive.exit.code).toBe(2);
    expect(naive.err).toContain('logical-date: "2026-03-01 10:00" is not an ISO-8601 moment with an offset or Z');
    const unknownDag = await run(spawnDeferflow(['dags', 'trigger', 'nope', '--db', db.url]));
    expect(unknownDag.exit.code).toBe(2);
    expect(unknownDag.err).toContain('dag-id: no DAG "nope" among the serialized DAGs (see deferflow dags list)');
    const typo = await run(spawnDeferflow(['dags', 'trigger', 'adohc', '--db', db.url]));
    expect(typo.exit.code).toBe(2);
    expect(typo.err).toContain('dag-id: no DAG "adohc" among the serialized DAGs (did you mean adhoc? see deferflow dags list)');
    // A DAG deleted since (its file gone) keeps its runs listed.
    await db.db
      .updateTable('serialized_dag')
      .set({ deleted_at: toDbTime(Date.now()) })
      .where('dag_id', '=', 'adhoc')
      .execute();
    const ofDeleted = await run(spawnDeferflow(['dags', 'runs', 'adhoc', '--db', db.url, '--json']));
    expect(ofDeleted.exit.code).toBe(0);
    expect((JSON.parse(ofDeleted.out.join('\n')) as unknown[]).length).toBeGreaterThan(0);
  }, 60_000);

  it('dags reserialize and dags list show import errors beside the DAGs that loaded, a compiler message of several lines in its own column', async () => {
    const db = await scratch.database(dialect);
    const dir = scratch.dir('dags');
    writeFileSync(path.join(dir, 'dags.mts'), DAGS);
    writeFileSync(
      path.join(dir, 'broken.ts'),
      `import { Dag } from ${JSON.stringify(PACKAGE_ENTRY)};\nexport const dag = new Dag({ dagId: 'broken'\nconst x = 1;\n`,
    );
    const broken = path.join(dir, 'broken.ts');
    const expected = (firstLines: string[]) => {
      const errorAt = firstLines.findIndex((line) => line.startsWith('IMPORT ERROR IN'));
      return firstLines.slice(errorAt);
    };

    const reserialized = await run(spawnDeferflow(['dags', 'reserialize', '--dags', dir, '--db', db.url]));
    // A file that does not load fails the command, but the DAGs that did load are written.
    expect(reserialized.exit.code).toBe(1);
    expect(reserialized.out.slice(0, 3)).toEqual(['DAG ID   RESULT', 'adhoc    created', 'nightly  created']);
    const errors = expected(reserialized.out);
    const column = errors[0]!.indexOf('ERROR', 'IMPORT ERROR IN'.length);
    expect(column).toBe(broken.length + 2);
    expect(errors[1]!.startsWith(`${broken}  could not be loaded:`)).toBe(true);
    // esbuild's message has a line of its own naming the place: under the first, not under the file.
    expect(errors.length).toBeGreaterThan(2);
    for (const continued of errors.slice(2)) expect(continued.slice(0, column)).toBe(' '.repeat(column));
    expect(errors.slice(2).join('\n')).toMatch(/broken\.ts:3:\d+: ERROR: Expected "\}" but found "const"/);

    const listed = await run(spawnDeferflow(['dags', 'list', '--db', db.url]));
    expect(listed.exit.code).toBe(0);
    expect(listed.out.slice(0, 3).map((line) => line.split(/ {2,}/)[0])).toEqual(['DAG ID', 'adhoc', 'nightly']);
    expect(expected(listed.out)).toEqual(errors);

    // Triggering the DAG the broken file defines names that file and its error, not an unknown DAG.
    const triggered = await run(spawnDeferflow(['dags', 'trigger', 'broken', '--db', db.url]));
    expect(triggered.exit.code).toBe(2);
    expect(triggered.err).toContain(
      `error [DF_DAG_IMPORT]: DAG "broken" is not among the serialized DAGs because the file that defines it did not import: ${broken} failed to import: `,
    );
    expect(triggered.err).toMatch(/Expected "\}" but found "const"/);
    // Another unknown id: the broken file is only counted.
    const unknown = await run(spawnDeferflow(['dags', 'trigger', 'weekly', '--db', db.url]));
    expect(unknown.exit.code).toBe(2);
    expect(unknown.err).toContain(
      'error [DF_INVALID_OPTION]: dag-id: no DAG "weekly" among the serialized DAGs (see deferflow dags list); 1 DAG file(s) failed to import (see deferflow dags list)',
    );
  }, 60_000);

  it('dags reserialize on a folder holding none of the DAG files processed before refuses and deletes nothing; --remove-missing does it', async () => {
    const db = await scratch.database(dialect);
    const dir = scratch.dir('dags');
    writeFileSync(path.join(dir, 'dags.mts'), DAGS);
    await processDagFolder(db, dir);
    const live = async () =>
      (await db.db.selectFrom('serialized_dag').select('dag_id').where('deleted_at', 'is', null).orderBy('dag_id').execute()).map((row) => row.dag_id);
    const empty = scratch.dir('empty');

    const refused = await run(spawnDeferflow(['dags', 'reserialize', '--dags', empty, '--db', db.url]));
    expect(refused.exit.code).toBe(2);
    expect(refused.err).toContain('error [DF_DAG_FOLDER]');
    expect(refused.err).toContain(`${empty} holds none of the 1 DAG file(s) processed before`);
    expect(refused.err).toContain('--remove-missing');
    expect(await live()).toEqual(['adhoc', 'nightly']);

    const missing = await run(spawnDeferflow(['dags', 'reserialize', '--dags', path.join(empty, 'nope'), '--db', db.url]));
    expect(missing.exit.code).toBe(2);
    expect(missing.err).toMatch(/error \[DF_INVALID_OPTION\]: dags: the DAG folder .*nope.* does not exist/);

    const meant = await run(spawnDeferflow(['dags', 'reserialize', '--dags', empty, '--remove-missing', '--db', db.url]));
    expect(meant.exit.code).toBe(0);
    expect(meant.out).toEqual(['DAG ID   RESULT', 'adhoc    deleted', 'nightly  deleted']);
    expect(await live()).toEqual([]);
  }, 60_000);
});
