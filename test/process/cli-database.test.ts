// What every command but `db migrate` (and standalone, which migrates) does with a database that
// is missing, never migrated, behind or ahead of this deferflow; and a --dags folder that is not
// there. Each is one clear line and exit 2, with nothing created.
import { existsSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { dropTestDatabases, freshDatabaseUrl, testDialects } from '../support/databases.ts';
import { processScratch } from '../support/process-scratch.ts';
import { spawnDeferflow, spawnTriggerer, type TriggererProcess } from '../support/processes.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

const outcome = async (proc: TriggererProcess) => ({ exit: await proc.exit, err: proc.stderr.join('\n'), out: proc.text });

describe.each(testDialects)('commands on a database that is not ready, on %s', (dialect) => {
  it('a database never migrated (a mistyped SQLite path: the file) is refused by every command with the fix, and nothing is created', async () => {
    const url = await freshDatabaseUrl(dialect);
    const dags = scratch.dir('dags');
    const commands: [string, TriggererProcess][] = [
      ['triggerer', spawnTriggerer(['--db', url])],
      ['worker', spawnDeferflow(['worker', '--db', url, '--dags', dags])],
      ['scheduler', spawnDeferflow(['scheduler', '--db', url])],
      ['dags list', spawnDeferflow(['dags', 'list', '--db', url])],
      ['dags reserialize', spawnDeferflow(['dags', 'reserialize', '--db', url, '--dags', dags])],
      ['tasks list', spawnDeferflow(['tasks', 'list', '--db', url, '--run', 'r'])],
      ['db schema', spawnDeferflow(['db', 'schema', '--db', url])],
    ];
    for (const [name, proc] of commands) {
      const { exit, err, out } = await outcome(proc);
      expect(exit, `${name}\n${proc.describe()}`).toEqual({ code: 2, signal: null });
      expect(err, name).toContain('error [DF_DATABASE_NOT_MIGRATED]');
      expect(err, name).toContain('deferflow db migrate --db ');
      expect(out, name).toEqual([]);
    }
    if (dialect === 'sqlite') {
      const file = url.slice('sqlite:'.length);
      expect(existsSync(file)).toBe(false);
      expect(commands[0]![1].stderr.join('\n')).toContain(`the SQLite database ${file} (${url}) does not exist`);
    } else {
      expect(commands[0]![1].stderr.join('\n')).toContain('is not migrated (it has no deferflow tables)');
    }
  }, 60_000);

  it('a database behind or ahead of this deferflow is refused, naming the versions', async () => {
    const db = await scratch.database(dialect);
    const rows = (await db.db
      .selectFrom('deferflow_migration' as never)
      .selectAll()
      .execute()) as { name: string }[];
    const latest = rows.map((row) => row.name).sort();
    // As if the last migration had not run yet (its row is all the check reads).
    await db.db
      .deleteFrom('deferflow_migration' as never)
      .where('name' as never, '=', latest.at(-1) as never)
      .execute();
    const behind = await outcome(spawnDeferflow(['dags', 'list', '--db', db.url]));
    expect(behind.exit.code).toBe(2);
    expect(behind.err).toContain(`is behind: it is at ${latest.at(-2)}, this deferflow needs ${latest.at(-1)}; run \`deferflow db migrate --db `);

    await db.db
      .insertInto('deferflow_migration' as never)
      .values(rows.find((row) => row.name === latest.at(-1)) as never)
      .execute();
    expect((await outcome(spawnDeferflow(['dags', 'list', '--db', db.url]))).exit.code).toBe(0);
    await db.db
      .insertInto('deferflow_migration' as never)
      .values({ name: '9999_from_the_future', timestamp: new Date().toISOString() } as never)
      .execute();
    const ahead = await outcome(spawnTriggerer(['--db', db.url]));
    expect(ahead.exit.code).toBe(2);
    expect(ahead.err).toContain('is newer than this deferflow: it has migration(s) 9999_from_the_future');
    expect(ahead.err).toContain('upgrade deferflow');
  }, 60_000);

  it('a --dags folder that does not exist is refused at start by worker and standalone', async () => {
    const db = await scratch.database(dialect);
    const missing = path.join(scratch.dir('dags'), 'not-here');
    for (const proc of [spawnDeferflow(['worker', '--db', db.url, '--dags', missing]), spawnDeferflow(['standalone', '--db', db.url, '--dags', missing])]) {
      const { exit, err } = await outcome(proc);
      expect(exit, proc.describe()).toEqual({ code: 2, signal: null });
      expect(err).toContain(`error [DF_INVALID_OPTION]: dags: the DAG folder ${JSON.stringify(missing)}`);
      expect(err).toContain('does not exist');
    }
    expect(await db.db.selectFrom('job').select('id').execute()).toEqual([]);
  }, 60_000);
});

describe('commands on a database server that does not answer', () => {
  it('are refused at start with DF_DATABASE naming the database (password masked) and the fix, exit 2', async () => {
    // A port nothing listens on: a server down, or restarting.
    const net = await import('node:net');
    const port = await new Promise<number>((resolve) => {
      const probe = net.createServer().listen(0, '127.0.0.1', () => {
        const { port: free } = probe.address() as import('node:net').AddressInfo;
        probe.close(() => resolve(free));
      });
    });
    const url = `postgres://deferflow:s3cret-pw@127.0.0.1:${port}/nowhere`;
    const dags = scratch.dir('dags');
    for (const [name, proc] of [
      ['triggerer', spawnTriggerer(['--db', url])],
      ['worker', spawnDeferflow(['worker', '--db', url, '--dags', dags])],
      ['scheduler', spawnDeferflow(['scheduler', '--db', url])],
      ['standalone', spawnDeferflow(['standalone', '--db', url, '--dags', dags])],
    ] as const) {
      const { exit, err } = await outcome(proc);
      expect(exit.code, name).toBe(2);
      expect(err, name).toContain(`error [DF_DATABASE]: could not reach the database postgres://deferflow:***@127.0.0.1:${port}/nowhere`);
      expect(err, name).toContain('check --db');
      expect(err, name).not.toContain('s3cret-pw');
    }
  });
});
