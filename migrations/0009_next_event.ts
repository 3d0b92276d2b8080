import { sql } from '../src/database/kysely.ts';
import type { Kysely } from 'kysely';
import type { DialectAdapter } from '../src/database/dialect.ts';

// Encryption at rest (issue 13). Immutable once released.
//
// task_instance.next_event: the event a trigger fired, for the resumed method (which receives
// it as kwargs.event). It was merged into next_kwargs in SQL; with next_kwargs encrypted there is
// no JSON to merge into, so the event is kept apart (one value per trigger, written for all its
// task instances in one statement as before) and the worker joins the two when it reads them.
// Rows moved before this migration keep their event inside next_kwargs and read as they did.

export async function up(db: Kysely<any>, adapter: DialectAdapter): Promise<void> {
  await sql`alter table task_instance add column next_event ${sql.raw(adapter.types.json)}`.execute(db);
}
