import { sql } from '../src/database/kysely.ts';
import type { Kysely } from 'kysely';
import type { DialectAdapter } from '../src/database/dialect.ts';

// Claims read only the rows they take (issue 13). Immutable once released.
//
// SQLite planned the claim's candidate query ("unowned, not quarantined, by priority, then age,
// limit N") on trigger_triggerer_id_idx, as an equality on triggerer_id IS NULL, then sorted every
// unowned row to keep N: 100,000 waiting triggers claimed 1,000 at a time read five million rows.
// - trigger_triggerer_id_idx now covers owned rows only (every lookup by owner compares
//   triggerer_id, which implies it is not null, so both dialects still use it), so it can no
//   longer serve "is null";
// - trigger_unowned_idx also leaves out quarantined rows, matching the claim's whole condition:
//   the candidates are the first N entries of that index, in its order, with no sort.

export async function up(db: Kysely<any>, _adapter: DialectAdapter): Promise<void> {
  await sql`drop index trigger_triggerer_id_idx`.execute(db);
  await sql`create index trigger_triggerer_id_idx on trigger (triggerer_id) where triggerer_id is not null`.execute(db);
  await sql`drop index trigger_unowned_idx`.execute(db);
  await sql`
    create index trigger_unowned_idx on trigger (priority_weight desc, created_at, id)
    where triggerer_id is null and quarantined_at is null
  `.execute(db);
}
