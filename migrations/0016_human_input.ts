import { sql } from '../src/database/kysely.ts';
import type { Kysely } from 'kysely';
import type { DialectAdapter } from '../src/database/dialect.ts';

// Human input (issue 44): a task instance asks a person a question and waits in the new state
// awaiting_input, holding no worker slot and no trigger row. task_input keeps the question (one
// per task instance: a new one replaces the last) and the response that won; the task instance's
// ready_at is the question's deadline while it waits, so the scheduler's ready_at sweep finds it.
// deferflow_secret keeps the key that signs the links when no key is configured.
// Immutable once released.

const STATES_BEFORE = [
  'scheduled',
  'queued',
  'running',
  'deferred',
  'success',
  'failed',
  'up_for_retry',
  'up_for_reschedule',
  'skipped',
  'upstream_failed',
];

export async function up(db: Kysely<any>, adapter: DialectAdapter): Promise<void> {
  const { json, time, bigint } = adapter.types;
  await adapter.widenInCheck(db, {
    table: 'task_instance',
    constraint: 'task_instance_state_check',
    column: 'state',
    values: STATES_BEFORE,
    added: ['awaiting_input'],
  });
  await sql`
    create table task_input (
      task_instance_id ${sql.raw(bigint)} primary key references task_instance (id) on delete cascade,
      try_number integer not null,
      nonce text not null,
      question ${sql.raw(json)} not null,
      asked_at ${sql.raw(time)} not null,
      timeout_at ${sql.raw(time)},
      responded_at ${sql.raw(time)},
      responded_by text,
      response_source text check (response_source in ('link', 'cli', 'http', 'api', 'page', 'timeout')),
      response ${sql.raw(json)}
    )`.execute(db);
  // The scheduler's sweep for questions past their deadline reads this.
  await sql`create index task_instance_awaiting_input_idx on task_instance (ready_at) where state = 'awaiting_input'`.execute(db);
  await sql`
    create table deferflow_secret (
      name text primary key,
      value text not null,
      created_at ${sql.raw(time)} not null
    )`.execute(db);
}
