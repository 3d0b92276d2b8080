import { sql } from '../src/database/kysely.ts';
import type { Kysely } from 'kysely';
import type { DialectAdapter } from '../src/database/dialect.ts';

// Who sent each signal (issue 46: a key's versions and who sent them): an operator from the
// status page or the CLI (their name, how and from where, as the audit log says), a client of
// POST /signals/:key (its address), a task (its DAG, task and run), the embedded API. Null for
// signals sent before this migration. Written in the send's own insert. Immutable once released.

export async function up(db: Kysely<any>, _adapter: DialectAdapter): Promise<void> {
  await sql`alter table signal add column sent_by text`.execute(db);
}
