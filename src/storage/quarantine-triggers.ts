import type { DialectAdapter } from '../database/dialect.ts';
import type { StorageContext } from './context.ts';

/**
 * Poison triggers: a trigger whose step held a triggerer's event loop past the watchdog's limit
 * is its culprit. The watchdog runs on a thread of its own (the loop it watches is stuck), with
 * a bare driver connection rather than kysely, so its one statement is given here as text: it
 * counts the culprit, hands it back (unowned), and quarantines it once the count reaches the
 * limit. Parameters, in order: the quarantine limit, the moment (ISO text), the trigger id.
 */
export function recordCulpritStatement(adapter: DialectAdapter): string {
  const [limit, now, id] = [1, 2, 3].map(adapter.parameter);
  return (
    `update trigger set culprit_count = culprit_count + 1, triggerer_id = null, ` +
    `quarantined_at = case when culprit_count + 1 >= cast(${limit} as integer) then cast(${now} as ${adapter.types.time}) else quarantined_at end where id = ${id}`
  );
}

export interface QuarantinedTrigger {
  readonly id: number;
  readonly classpath: string;
  readonly culpritCount: number;
}

/** Quarantined triggers whose rows remain (their task instances not yet failed), at most `limit`. */
export async function listQuarantinedTriggers({ db }: StorageContext, limit: number): Promise<QuarantinedTrigger[]> {
  const rows = await db
    .selectFrom('trigger')
    .select(['id', 'classpath', 'culprit_count'])
    .where('quarantined_at', 'is not', null)
    .orderBy('id')
    .limit(limit)
    .execute();
  return rows.map((row) => ({ id: row.id, classpath: row.classpath, culpritCount: row.culprit_count }));
}
