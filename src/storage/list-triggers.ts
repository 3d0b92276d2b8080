import { sql } from '../database/kysely.ts';
import { fromDbTime } from '../database/schema.ts';
import type { StorageContext } from './context.ts';

/** A trigger row as `deferflow triggers list` shows it: never its kwargs (they may hold secrets). */
export interface TriggerListing {
  readonly id: number;
  readonly classpath: string;
  readonly createdAt: number;
  /** The triggerer job running it, and that job's host; null while unowned. */
  readonly triggererId: number | null;
  readonly triggererHost: string | null;
  /** How many task instances wait on it, and the first few of them (lowest id first). */
  readonly taskInstanceCount: number;
  readonly taskInstances: readonly { readonly id: number; readonly dagId: string; readonly taskId: string; readonly runId: string }[];
  /** The composite waits (anyOf, allOf: their trigger ids) it is a member of and has not fired into: waited on through them. */
  readonly memberOf: readonly number[];
}

/**
 * Triggers, oldest first (by id), at most `limit`, after `afterId` when given (the next page),
 * optionally only those of one triggerer; `perTrigger` task instances named for each.
 */
export async function listTriggers(
  { db, adapter }: StorageContext,
  filter: { readonly limit: number; readonly triggererId?: number; readonly perTrigger: number; readonly afterId?: number },
): Promise<TriggerListing[]> {
  let query = db
    .selectFrom('trigger')
    .leftJoin('job', 'job.id', 'trigger.triggerer_id')
    .select([
      'trigger.id',
      'trigger.classpath',
      'trigger.created_at',
      'trigger.triggerer_id',
      'job.hostname',
      (eb) => eb.selectFrom('task_instance').select(sql<number>`count(*)`.as('n')).whereRef('task_instance.trigger_id', '=', 'trigger.id').as('waiting'),
    ])
    .orderBy('trigger.id')
    .limit(filter.limit);
  if (filter.triggererId !== undefined) query = query.where('trigger.triggerer_id', '=', filter.triggererId);
  if (filter.afterId !== undefined) query = query.where('trigger.id', '>', filter.afterId);
  const rows = await query.execute();
  if (rows.length === 0) return [];
  const linked = await db
    .selectFrom('task_instance')
    .select(['id', 'dag_id', 'task_id', 'run_id', 'trigger_id'])
    .where(
      adapter.idIn(
        'trigger_id',
        rows.map((row) => row.id),
      ),
    )
    .orderBy('id')
    .execute();
  const byTrigger = new Map<number, TriggerListing['taskInstances'][number][]>();
  for (const ti of linked) {
    const list = byTrigger.get(ti.trigger_id!) ?? [];
    if (list.length < filter.perTrigger) list.push({ id: ti.id, dagId: ti.dag_id, taskId: ti.task_id, runId: ti.run_id });
    byTrigger.set(ti.trigger_id!, list);
  }
  const memberships = await db
    .selectFrom('trigger_member')
    .select(['member_id', 'composite_id'])
    .where(
      adapter.idIn(
        'member_id',
        rows.map((row) => row.id),
      ),
    )
    .where('outcome', 'is', null)
    .orderBy('composite_id')
    .execute();
  const compositesOf = new Map<number, number[]>();
  for (const { member_id, composite_id } of memberships) compositesOf.set(member_id, [...(compositesOf.get(member_id) ?? []), composite_id]);
  return rows.map((row) => ({
    id: row.id,
    classpath: row.classpath,
    createdAt: fromDbTime(row.created_at),
    triggererId: row.triggerer_id,
    triggererHost: row.hostname ?? null,
    taskInstanceCount: Number(row.waiting ?? 0),
    taskInstances: byTrigger.get(row.id) ?? [],
    memberOf: compositesOf.get(row.id) ?? [],
  }));
}

/** How many triggers each of these triggerer jobs owns (absent: none). */
export async function ownedTriggerCounts({ db, adapter }: StorageContext, triggererIds: readonly number[]): Promise<Map<number, number>> {
  if (triggererIds.length === 0) return new Map();
  const rows = await db
    .selectFrom('trigger')
    .select(['triggerer_id', sql<number>`count(*)`.as('n')])
    .where(adapter.idIn('triggerer_id', triggererIds))
    .groupBy('triggerer_id')
    .execute();
  return new Map(rows.map((row) => [row.triggerer_id!, Number(row.n)]));
}
