import { sql } from '../src/database/kysely.ts';
import type { Kysely } from 'kysely';
import type { DialectAdapter } from '../src/database/dialect.ts';

// Watchers (issue 45): a DAG scheduled on triggers that run continuously, every event starting
// one DAG run per DAG watching. Immutable once released.
//
// - A watcher is a trigger row (ownership, high availability, capacity and queues as for any
//   trigger) with `watcher` set: it never fires once and is done, it runs while a DAG links it.
//   Identical watchers of several DAGs are one row (its hash, prefixed so that a watcher never
//   shares a row with a task's wait of the same trigger).
// - trigger.cursor: the watcher's durable position (JSON), written in the same transaction as the
//   DAG runs its events made, so a peer taking the watcher over resumes exactly after them;
//   trigger.last_event_at: when it last made runs.
// - dag_watcher: which DAG watches which trigger row; written when DAG files are processed.
//   No foreign key to trigger: a trigger row is deleted on the path every fired wait takes, and
//   a lookup here per deleted row would cost every one of them (the links are removed with the
//   DAG's watchers instead).
// - dag_run.run_type takes 'event': a run a watcher's event made (its run id from the event's key).
// - serialized_dag.paused: a paused DAG gets no scheduled, signal or event runs; its watchers
//   stop once no DAG that is neither paused nor deleted watches them (their rows, cursors
//   included, stay for when it is unpaused or comes back).

export async function up(db: Kysely<any>, adapter: DialectAdapter): Promise<void> {
  const { json, time, bigint } = adapter.types;
  await sql`alter table trigger add column watcher integer not null default 0`.execute(db);
  await sql`alter table trigger add column cursor ${sql.raw(json)}`.execute(db);
  await sql`alter table trigger add column last_event_at ${sql.raw(time)}`.execute(db);
  await sql`
    create table dag_watcher (
      dag_id text not null,
      trigger_id ${sql.raw(bigint)} not null,
      constraint dag_watcher_pkey primary key (dag_id, trigger_id)
    )`.execute(db);
  await sql`create index dag_watcher_trigger_idx on dag_watcher (trigger_id)`.execute(db);
  await sql`alter table serialized_dag add column paused integer not null default 0`.execute(db);
  await adapter.widenInCheck(db, { table: 'dag_run', constraint: 'dag_run_run_type_check', column: 'run_type', values: ['manual', 'scheduled'], added: ['event'] });
}
