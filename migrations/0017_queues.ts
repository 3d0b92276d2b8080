import { sql } from '../src/database/kysely.ts';
import type { Kysely } from 'kysely';
import type { DialectAdapter } from '../src/database/dialect.ts';

// Queues (issue 45): a task names a queue, the triggers it defers on inherit it, and workers and
// triggerers started with --queues claim only those (src/model/queues.ts). Immutable once released.
//
// - task_instance.queue, trigger.queue: the queue of the work, `default` unless a task names one
//   (a column default: existing rows are in it, and neither dialect rewrites the table for it).
// - job.queues: the queues a worker or triggerer serves, comma-separated as --queues takes them
//   (`default,gpu`); null for a scheduler, or a daemon from before queues (it served `default`).
//   What `jobs queues`, `jobs check`, the status page and the unserved-work gauge compare work with.
// - The claim indexes lead with the queue: a claim reads its own queues' rows only, so work piled
//   up in a queue that nothing serves never slows the claims of the others. The queue is never
//   null: PostgreSQL walks an index in order after an equality, but sorts after `is null`.

export async function up(db: Kysely<any>, _adapter: DialectAdapter): Promise<void> {
  await sql`alter table task_instance add column queue text not null default 'default'`.execute(db);
  await sql`alter table trigger add column queue text not null default 'default'`.execute(db);
  await sql`alter table job add column queues text`.execute(db);
  await sql`drop index task_instance_claimable_idx`.execute(db);
  await sql`create index task_instance_claimable_idx on task_instance (queue, priority_weight desc, id) where state = 'scheduled'`.execute(db);
  await sql`drop index trigger_unowned_idx`.execute(db);
  await sql`
    create index trigger_unowned_idx on trigger (queue, priority_weight desc, created_at, id)
    where triggerer_id is null and quarantined_at is null
  `.execute(db);
}
