// The migrations through the real CLI (`deferflow db migrate` / `db schema`), the committed
// schema dumps under migrations/schema/, and the constraints the schema promises.
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { Migrator, sql, type Kysely } from 'kysely';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { openDatabase, type Database } from '../../src/database/connect.ts';
import { MIGRATIONS_DIR, migrateToLatest } from '../../src/database/migrate.ts';
import { MIGRATIONS } from '../../migrations/index.ts';
import { TASK_INSTANCE_STATES, toDbTime, type TaskInstanceState } from '../../src/database/schema.ts';
import { dropTestDatabases, freshDatabaseUrl, testDialects } from '../support/databases.ts';
import { migratedDatabase, type TestDatabase } from '../support/fixtures.ts';
import { REPO_ROOT } from '../support/processes.ts';

const DEFERFLOW_BIN = path.join(REPO_ROOT, 'bin/deferflow.js');
const MIGRATION_NAMES = readdirSync(MIGRATIONS_DIR)
  .filter((file) => /^\d{4}_[a-z0-9_]+\.ts$/.test(file))
  .sort()
  .map((file) => file.replace(/\.ts$/, ''));

interface CliResult {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

const running = new Set<ChildProcess>();

/** `node bin/deferflow.js ARGS` in the repository root, run to its end. */
function deferflow(args: readonly string[]): Promise<CliResult> {
  const child = spawn(process.execPath, [DEFERFLOW_BIN, ...args], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  running.add(child);
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  return new Promise((resolve) => {
    child.on('error', (error) => {
      running.delete(child);
      resolve({ code: null, signal: null, stdout, stderr: `${stderr}spawn error: ${error.message}` });
    });
    child.on('close', (code, signal) => {
      running.delete(child);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

const describeRun = (result: CliResult) => `exit ${result.code} ${result.signal ?? ''}\nstdout: ${result.stdout}\nstderr: ${result.stderr}`;

async function migrationRows(database: Database): Promise<string[]> {
  const result = await sql<{ name: string }>`select name from deferflow_migration order by name`.execute(database.db);
  return result.rows.map((row) => row.name);
}

afterEach(async () => {
  const left = [...running];
  for (const child of left) child.kill('SIGKILL');
  await Promise.all(
    left.map((child) => new Promise((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve(null) : child.once('close', resolve)))),
  );
});
afterAll(dropTestDatabases);

describe('the migrations list', () => {
  it('names every numbered file in migrations/, in order (the compiled package runs this list, it does not scan)', () => {
    expect(Object.keys(MIGRATIONS)).toEqual(MIGRATION_NAMES);
  });
});

describe.each(testDialects)('migrations on %s', (dialect) => {
  const open: Database[] = [];
  afterEach(async () => {
    await Promise.all(open.splice(0).map((database) => database.close()));
  });
  const opened = (url: string) => {
    const database = openDatabase(url);
    open.push(database);
    return database;
  };
  const migrated = async (): Promise<TestDatabase> => {
    const database = await migratedDatabase(dialect);
    open.push(database);
    return database;
  };

  it('0016 widens the task instance state check in place: a database at 0015 keeps every row, its children too, and takes awaiting_input', async () => {
    const url = await freshDatabaseUrl(dialect);
    const database = opened(url);
    const upTo0015 = Object.fromEntries(
      Object.entries(MIGRATIONS)
        .filter(([name]) => name <= '0015_trigger_member')
        .map(([name, module]) => [name, { up: (db: Kysely<any>) => module.up(db, database.adapter) }]),
    );
    const older = new Migrator({
      db: database.db,
      // As migrate.ts does: the bookkeeping tables of this schema, not a same-named one elsewhere.
      migrationTableSchema:
        dialect === 'postgres' ? (await sql<{ schema: string }>`select current_schema() as schema`.execute(database.db)).rows[0]!.schema : undefined,
      provider: { getMigrations: async () => upTo0015 },
      migrationTableName: 'deferflow_migration',
      migrationLockTableName: 'deferflow_migration_lock',
    });
    expect((await older.migrateToLatest()).error).toBeUndefined();
    const now = toDbTime(Date.now());
    const { id } = await database.db
      .insertInto('task_instance')
      .values({ dag_id: 'old', task_id: 'kept', run_id: 'manual__1', state: 'running', try_number: 1 })
      .returning('id')
      .executeTakeFirstOrThrow();
    // Children with ON DELETE CASCADE: a table rebuild would have taken them with it.
    await database.db.insertInto('task_state').values({ task_instance_id: id, key: 'job', value: '"job-1"', try_number: 1, updated_at: now }).execute();
    await database.db
      .insertInto('task_reschedule')
      .values({ task_instance_id: id, try_number: 1, start_date: now, end_date: now, reschedule_date: now })
      .execute();
    await expect(
      database.db
        .updateTable('task_instance')
        .set({ state: 'awaiting_input' as TaskInstanceState })
        .where('id', '=', id)
        .execute(),
    ).rejects.toThrow(/check/i);

    expect(await migrateToLatest(database)).toContain('0016_human_input');
    await database.db.updateTable('task_instance').set({ state: 'awaiting_input' }).where('id', '=', id).execute();
    expect(await database.db.selectFrom('task_instance').select(['dag_id', 'state']).where('id', '=', id).executeTakeFirst()).toEqual({
      dag_id: 'old',
      state: 'awaiting_input',
    });
    expect(await database.db.selectFrom('task_state').select('key').where('task_instance_id', '=', id).execute()).toEqual([{ key: 'job' }]);
    expect((await database.db.selectFrom('task_reschedule').select('id').where('task_instance_id', '=', id).execute()).length).toBe(1);
    // Still a check: a state deferflow does not have is refused.
    await expect(
      database.db
        .updateTable('task_instance')
        .set({ state: 'bogus' as TaskInstanceState })
        .where('id', '=', id)
        .execute(),
    ).rejects.toThrow(/check/i);
    if (dialect === 'sqlite') {
      expect((await sql<{ integrity_check: string }>`pragma integrity_check`.execute(database.db)).rows).toEqual([{ integrity_check: 'ok' }]);
      // The connection is back in defensive mode: the schema cannot be written outside a migration.
      await sql`pragma writable_schema = on`.execute(database.db);
      await expect(sql`update sqlite_master set sql = sql where name = 'task_instance'`.execute(database.db)).rejects.toThrow();
    }
  });

  it('db migrate applies 0001_initial on a fresh database, then reports it up to date', async () => {
    const url = await freshDatabaseUrl(dialect);

    const first = await deferflow(['db', 'migrate', '--db', url]);
    expect(first.code, describeRun(first)).toBe(0);
    expect(first.stdout).toMatch(/^applied \d+ migration\(s\) to .*: .*\b0001_initial\b/);
    expect(first.stderr).toBe('');

    const second = await deferflow(['db', 'migrate', '--db', url]);
    expect(second.code, describeRun(second)).toBe(0);
    expect(second.stdout).toMatch(/ is up to date\n$/);
    expect(second.stdout).not.toMatch(/applied/);

    expect(await migrationRows(opened(url))).toEqual(MIGRATION_NAMES);
  });

  it('five db migrate processes started at once all succeed and record each migration once', async () => {
    const url = await freshDatabaseUrl(dialect);

    const results = await Promise.all(Array.from({ length: 5 }, () => deferflow(['db', 'migrate', '--db', url])));

    for (const result of results) expect(result.code, describeRun(result)).toBe(0);
    expect(
      results.filter((result) => /\b0001_initial\b/.test(result.stdout)),
      'exactly one process applies 0001_initial',
    ).toHaveLength(1);
    const database = opened(url);
    const counted = await sql<{ n: number | string }>`select count(*) as n from deferflow_migration where name = '0001_initial'`.execute(database.db);
    expect(Number(counted.rows[0]?.n)).toBe(1);
    expect(await migrationRows(database)).toEqual(MIGRATION_NAMES);
  });

  // The process test above races only when the five start-ups happen to line up; five
  // connections in one process interleave at every await, so this one races every time.
  it('five concurrent migrateToLatest calls on separate connections all succeed and record each migration once', async () => {
    const url = await freshDatabaseUrl(dialect);
    const databases = Array.from({ length: 5 }, () => opened(url));

    const outcomes = await Promise.allSettled(databases.map((database) => migrateToLatest(database)));

    const failures = outcomes.flatMap((outcome) => (outcome.status === 'rejected' ? [String(outcome.reason)] : []));
    expect(failures, 'concurrent migrations must wait for each other, not fail').toEqual([]);
    const applied = outcomes.flatMap((outcome) => (outcome.status === 'fulfilled' ? outcome.value : []));
    expect(applied.sort()).toEqual(MIGRATION_NAMES);
    expect(await migrationRows(databases[0]!)).toEqual(MIGRATION_NAMES);
  });

  it.runIf(dialect === 'postgres')('migrating looks at its own schema only: another schema and its tables do not matter', async () => {
    const database = await migrated();
    const other = await freshDatabaseUrl('postgres');
    const otherDatabase = opened(other);
    // A same-named bookkeeping table elsewhere, and a serial column (what kysely's own
    // introspector resolved per table, across every schema, racing concurrent drops).
    await sql`create table deferflow_migration (name text, timestamp text, id serial)`.execute(otherDatabase.db);
    const tables = await database.db.introspection.getTables();
    const schema = (await sql<{ name: string }>`select current_schema() as name`.execute(database.db)).rows[0]!.name;
    expect(new Set(tables.map((table) => table.schema))).toEqual(new Set([schema]));
    expect(tables.map((table) => table.name)).toEqual(expect.arrayContaining(['deferflow_migration', 'task_instance', 'trigger']));
    // Each schema keeps its own migration history.
    expect(await migrateToLatest(otherDatabase)).toEqual(MIGRATION_NAMES);
    expect(await migrateToLatest(database)).toEqual([]);
  });

  it(`db schema on a freshly migrated database prints the committed migrations/schema/${dialect}.sql`, async () => {
    const database = await migrated();
    const committedFile = path.join(MIGRATIONS_DIR, 'schema', `${dialect}.sql`);
    const committed = readFileSync(committedFile, 'utf8');

    const dump = await deferflow(['db', 'schema', '--db', database.url]);

    expect(dump.code, describeRun(dump)).toBe(0);
    expect(
      dump.stdout,
      `the schema the migrations build differs from ${path.relative(REPO_ROOT, committedFile)}: ` +
        'run `npm run db:schema` and review the diff (a released migration must not change; add a new one)',
    ).toBe(committed);
  });

  const insertTrigger = async (database: TestDatabase) =>
    (
      await database.db
        .insertInto('trigger')
        .values({
          classpath: 'test.ImmediateTrigger',
          kwargs: database.adapter.jsonParam('{}'),
          created_at: toDbTime(Date.now()),
          triggerer_id: null,
          hash: null,
        })
        .returning('id')
        .executeTakeFirstOrThrow()
    ).id;

  let taskCounter = 0;
  const insertTaskInstance = async (database: TestDatabase, state: TaskInstanceState | null, triggerId: number | null) =>
    (
      await database.db
        .insertInto('task_instance')
        .values({ dag_id: 'schema_dag', task_id: `task_${++taskCounter}`, run_id: 'manual__1', state, trigger_id: triggerId })
        .returning('id')
        .executeTakeFirstOrThrow()
    ).id;

  it('deleting a trigger a task instance points at fails and never deletes or detaches the task instance', async () => {
    const database = await migrated();
    const triggerId = await insertTrigger(database);
    const taskInstanceId = await insertTaskInstance(database, 'deferred', triggerId);

    await expect(database.db.deleteFrom('trigger').where('id', '=', triggerId).execute()).rejects.toThrow(/foreign key/i);

    const row = await database.db.selectFrom('task_instance').select(['state', 'trigger_id']).where('id', '=', taskInstanceId).executeTakeFirst();
    expect(row).toEqual({ state: 'deferred', trigger_id: triggerId });
    expect(await database.db.selectFrom('trigger').select('id').where('id', '=', triggerId).execute()).toEqual([{ id: triggerId }]);

    // Once nothing points at it, the trigger goes.
    await database.db.updateTable('task_instance').set({ state: 'scheduled', trigger_id: null }).where('id', '=', taskInstanceId).execute();
    await database.db.deleteFrom('trigger').where('id', '=', triggerId).execute();
    expect(await database.db.selectFrom('trigger').select('id').execute()).toEqual([]);
  });

  it('a task instance in any state but deferred cannot point at a trigger', async () => {
    const database = await migrated();
    const triggerId = await insertTrigger(database);

    const accepted: TaskInstanceState[] = [];
    for (const state of TASK_INSTANCE_STATES.filter((state) => state !== 'deferred')) {
      try {
        await insertTaskInstance(database, state, triggerId);
        accepted.push(state);
      } catch (error) {
        expect(String(error)).toMatch(/task_instance_trigger_only_when_deferred/);
      }
    }
    expect(accepted, 'states the check constraint let point at a trigger').toEqual([]);

    // Deferred may; leaving deferred while keeping the trigger may not.
    const deferred = await insertTaskInstance(database, 'deferred', triggerId);
    await expect(database.db.updateTable('task_instance').set({ state: 'scheduled' }).where('id', '=', deferred).execute()).rejects.toThrow(
      /task_instance_trigger_only_when_deferred/,
    );
    expect(await database.db.selectFrom('task_instance').select(['state', 'trigger_id']).where('id', '=', deferred).executeTakeFirst()).toEqual({
      state: 'deferred',
      trigger_id: triggerId,
    });
  });

  // state is nullable (Airflow's "no state"); `state = 'deferred'` is then NULL, which a CHECK
  // constraint treats as passing unless the constraint rules NULL out itself.
  it('a task instance with no state cannot point at a trigger', async () => {
    const database = await migrated();
    const triggerId = await insertTrigger(database);

    await expect(insertTaskInstance(database, null, triggerId), 'inserting a state-less task instance on a trigger').rejects.toThrow(
      /task_instance_trigger_only_when_deferred/,
    );
    const deferred = await insertTaskInstance(database, 'deferred', triggerId);
    await expect(
      database.db.updateTable('task_instance').set({ state: null }).where('id', '=', deferred).execute(),
      'clearing the state of a deferred task instance that keeps its trigger',
    ).rejects.toThrow(/task_instance_trigger_only_when_deferred/);
  });
});
