import { sql } from '../src/database/kysely.ts';
import type { Kysely } from 'kysely';
import type { DialectAdapter } from '../src/database/dialect.ts';

// Which key material each encryption key id stands for (issue 40). Immutable once released.
//
// An operator who pastes another key under an id the database already knows would otherwise
// seal new values with a key no other process holds, and `db rotate-key` would count values
// sealed with the real key as current from their id alone. check_value is an HMAC of a fixed
// label under the key (never the key, nor anything that opens a value): a process compares its
// own at start and refuses a key whose id is recorded with another value, without reading rows.

export async function up(db: Kysely<any>, adapter: DialectAdapter): Promise<void> {
  await sql`
    create table encryption_key (
      key_id text primary key,
      check_value text not null,
      recorded_at ${sql.raw(adapter.types.time)} not null
    )`.execute(db);
}
