import { sql } from '../src/database/kysely.ts';
import type { Kysely } from 'kysely';
import type { DialectAdapter } from '../src/database/dialect.ts';

// Signal actions (AIP-35's start, restart and stop conditions on operators). Immutable once released.
//
// task_instance_signal: for each task instance whose task declares an action on a key, the
// version of that key its action last took into account; a newer version is one to act on. It is
// set to the key's latest version when the DAG run is created, so only signals sent after that
// act; acted_version is the one that last changed the task instance. Moving it forward and changing the task instance happen in one transaction, conditional on
// the version read: several schedulers act on one version once.
//
// task_instance.stop_request: set on a running task instance that a signal stops or restarts;
// the worker running it aborts the try and carries the request out (or the scheduler, when that
// worker died). Only a running task instance carries one.
//
// dag_signal_start: for a DAG scheduled on a signal key without a startDate, the version its
// runs start after (the key's latest when a scheduler first saw the DAG), kept so a restart
// before its first run still catches up the versions sent meanwhile.

export async function up(db: Kysely<any>, adapter: DialectAdapter): Promise<void> {
  const { bigint } = adapter.types;
  await sql`
    create table task_instance_signal (
      task_instance_id ${sql.raw(bigint)} not null references task_instance (id) on delete cascade,
      signal_key text not null,
      version ${sql.raw(bigint)} not null check (version >= 0),
      -- The version that last started, restarted or stopped it; null while none has.
      acted_version ${sql.raw(bigint)},
      constraint task_instance_signal_pkey primary key (task_instance_id, signal_key)
    )`.execute(db);
  // The scheduler's look for versions to act on starts from the keys.
  await sql`create index task_instance_signal_key_idx on task_instance_signal (signal_key, version)`.execute(db);
  await sql`
    create table dag_signal_start (
      dag_id text primary key,
      signal_key text not null,
      after_version ${sql.raw(bigint)} not null check (after_version >= 0)
    )`.execute(db);
  await sql`
    alter table task_instance add column stop_request text
      constraint task_instance_stop_request_check
      check (stop_request is null or (stop_request in ('restart', 'success', 'failed', 'skipped') and state = 'running'))`.execute(db);
}
