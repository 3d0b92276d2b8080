import { Writable } from 'node:stream';
import { openDatabase, type Database } from '../../src/database/connect.ts';
import { migrateToLatest } from '../../src/database/migrate.ts';
import { toDbTime, type DatabaseSchema, type SealableJson, type TaskInstanceState } from '../../src/database/schema.ts';
import type { FailureKwargs, MoveResult, Stores } from '../../src/storage/index.ts';
import type { TaskEndState } from '../../src/authoring/triggers/trigger-event.ts';
import { freshDatabaseUrl, freshPostgresDatabaseUrl, type TestDialect } from './databases.ts';

export interface TestDatabase extends Database {
  readonly url: string;
}

/**
 * A fresh, migrated database of `dialect`: on PostgreSQL a database of its own copied from the
 * run's migrated template, on SQLite a new file migrated here.
 */
export async function migratedDatabase(dialect: TestDialect): Promise<TestDatabase> {
  const url = dialect === 'postgres' ? await freshPostgresDatabaseUrl({ migrated: true }) : await freshDatabaseUrl(dialect);
  const database = openDatabase(url);
  if (dialect === 'sqlite') await migrateToLatest(database);
  return Object.assign(database, { url });
}

/** How many rows `table` holds: what a test counts to see that something was written once each. */
export async function countRows(database: Database, table: keyof DatabaseSchema): Promise<number> {
  const row = await database.db
    .selectFrom(table)
    .select((eb) => eb.fn.countAll().as('n'))
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

let taskCounter = 0;

export async function createTaskInstance(
  database: Database,
  fields: { state?: TaskInstanceState; priorityWeight?: number; dagId?: string; taskId?: string; queue?: string } = {},
): Promise<number> {
  const row = await database.db
    .insertInto('task_instance')
    .values({
      dag_id: fields.dagId ?? 'test_dag',
      task_id: fields.taskId ?? `task_${++taskCounter}_${process.pid}`,
      run_id: 'manual__1',
      state: fields.state ?? 'running',
      priority_weight: fields.priorityWeight ?? 1,
      queue: fields.queue ?? 'default',
      start_date: toDbTime(Date.now()),
    })
    .returning('id')
    .executeTakeFirstOrThrow();
  return row.id;
}

export async function taskInstance(database: Database, id: number) {
  const row = await database.db.selectFrom('task_instance').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
  return {
    ...row,
    next_kwargs: row.next_kwargs === null ? null : (parsePlain(row.next_kwargs) as Record<string, unknown>),
    next_event: row.next_event === null ? null : parsePlain(row.next_event),
  };
}

/** A column value that may be sealed, read from a database without keys: parsed, it must be plain. */
export function parsePlain(value: SealableJson): any {
  if (typeof value !== 'string') throw new Error(`expected a plain JSON value, got ${value.byteLength} sealed bytes`);
  return JSON.parse(value);
}

/** Log lines captured from an in-process triggerer. */
export class LogCapture extends Writable {
  readonly lines: Record<string, unknown>[] = [];
  override _write(chunk: Buffer, _encoding: string, callback: () => void): void {
    for (const line of chunk.toString().split('\n')) if (line.trim()) this.lines.push(JSON.parse(line));
    callback();
  }
  matching(predicate: (line: Record<string, unknown>) => boolean): Record<string, unknown>[] {
    return this.lines.filter(predicate);
  }
  /**
   * The matching lines once there are at least `atLeast` of them. A daemon logs what it wrote
   * after the write commits, so a line can come just after a test has seen the row.
   */
  waitForLines(
    predicate: (line: Record<string, unknown>) => boolean,
    { atLeast = 1, what }: { atLeast?: number; what: string },
  ): Promise<Record<string, unknown>[]> {
    return waitFor(
      () => {
        const lines = this.matching(predicate);
        return lines.length >= atLeast ? lines : null;
      },
      { what },
    );
  }
}

export async function waitFor<T>(
  probe: () => Promise<T> | T,
  { timeoutMs = 10_000, intervalMs = 25, what = 'condition' }: { timeoutMs?: number; intervalMs?: number; what?: string } = {},
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: T | undefined;
  while (Date.now() < deadline) {
    last = await probe();
    if (last) return last as NonNullable<T>;
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${JSON.stringify(last)})`);
}

/** Moves the task instances of trigger events, as the triggerer's writer does (prepared and moved in one call). */
export function submitEvents(
  storage: Stores,
  events: readonly { readonly triggerId: number; readonly payloadJson: string; readonly endState?: TaskEndState | null }[],
  now = Date.now(),
): Promise<MoveResult> {
  const outcomes = events.map((event) => ({ kind: 'event' as const, endState: null, firedAt: 0, ...event }));
  return storage.triggers.moveDeferredTaskInstances(storage.triggers.prepareOutcomes(outcomes), now);
}

/** Moves the task instances of trigger failures to their failure marker, as the triggerer's writer does. */
export function submitFailures(
  storage: Stores,
  failures: readonly { readonly triggerId: number; readonly failure: FailureKwargs }[],
  now = Date.now(),
): Promise<MoveResult> {
  const outcomes = failures.map((failure) => ({ kind: 'failure' as const, ...failure }));
  return storage.triggers.moveDeferredTaskInstances(storage.triggers.prepareOutcomes(outcomes), now);
}
