import { sql } from '../src/database/kysely.ts';
import type { Kysely } from 'kysely';
import type { DialectAdapter } from '../src/database/dialect.ts';

// What a sent signal reaches (issue 40): `signal send` and POST /signals/:key count the waits on
// signal triggers. Immutable once released.
//
// A partial index of the signal trigger's rows alone, so that count reads those rows, not every
// trigger's; other triggers' inserts do not touch it.

export async function up(db: Kysely<any>, _adapter: DialectAdapter): Promise<void> {
  await sql`create index trigger_signal_idx on trigger (id) where classpath = 'deferflow.triggers.SignalTrigger'`.execute(db);
}
