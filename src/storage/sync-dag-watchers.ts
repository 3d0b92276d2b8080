import { toDbTime } from '../database/schema.ts';
import { triggerHash } from '../authoring/triggers/base-trigger.ts';
import type { WatchSchedule } from '../model/scheduler-dag.ts';
import { DEFAULT_QUEUE } from '../model/queues.ts';
import type { StorageContext } from './context.ts';
import { activelyWatched } from './active-watcher.ts';
import { wake } from './wake.ts';
import type { JsonObject, JsonValue } from '../vocabulary/serialization/json.ts';

/** A processed DAG and its watch schedule (null: it is not scheduled on watchers, or no longer). */
export interface DagWatchers {
  readonly dagId: string;
  readonly schedule: WatchSchedule | null;
}

/**
 * The hash of a watcher's trigger row: watchers alike in classpath, kwargs and queue are one row
 * (an event filter, a DAG's own, is no part of it). Never a task wait's row: a wait is done at
 * its first event, a watcher runs on.
 */
export function watcherRowHash(keyring: StorageContext['keyring'], watcher: { classpath: string; kwargs: JsonObject }, queue: string): string {
  return keyring.triggerHash(`watch:${triggerHash(watcher)}${queue === DEFAULT_QUEUE ? '' : `@${queue}`}`);
}

/**
 * The event filters a DAG applies to the events of the watcher row hashed `rowHash`: those of its
 * watchers stored as that row (more than one when it watches one shared upstream twice); null
 * when it takes every event (one of them has no filter, or none is that row any more).
 */
export function dagEventFilters(keyring: StorageContext['keyring'], schedule: WatchSchedule | null, rowHash: string | null): JsonValue[] | null {
  const filters = (schedule?.watchers ?? [])
    .filter((watcher) => watcherRowHash(keyring, watcher, schedule!.queue) === rowHash)
    .map((watcher) => watcher.eventFilter);
  if (filters.length === 0 || filters.includes(undefined)) return null;
  return filters as JsonValue[];
}

/**
 * Makes the watcher rows and links match the DAGs just processed, in one transaction:
 * - each watcher of a DAG scheduled on watchers is a trigger row (inserted, or the identical
 *   watcher's row another DAG has already: watchers share by hash, within their queue), linked
 *   to the DAG in dag_watcher;
 * - a given DAG's links to anything else are removed, and a watcher row no DAG links any more is
 *   deleted (the triggerer running it sees its row gone and stops it);
 * - the watchers of `inactive` DAGs (marked deleted, or paused) that no active DAG watches are
 *   released by their triggerers' (which stop them) and left unclaimed, rows and cursors kept for
 *   when the DAG is back (see active-watcher.ts).
 * DAGs not named (their file failed to load) keep their links. A change wakes the triggerers.
 */
export async function syncDagWatchers(
  { db, adapter, keyring }: StorageContext,
  dags: readonly DagWatchers[],
  inactive: readonly string[],
  now: number,
): Promise<void> {
  const wanted = dags.flatMap(({ dagId, schedule }) =>
    (schedule?.watchers ?? []).map((watcher) => ({
      dagId,
      classpath: watcher.classpath,
      kwargs: keyring.seal(JSON.stringify(watcher.kwargs), 'trigger.kwargs'),
      hash: watcherRowHash(keyring, watcher, schedule!.queue),
      queue: schedule!.queue,
    })),
  );
  const named = dags.map((dag) => dag.dagId);
  const touched = [...named, ...inactive];
  if (touched.length === 0) return;
  // Most deployments schedule nothing on watchers: one read, no write transaction, each pass.
  if (wanted.length === 0 && !(await db.selectFrom('dag_watcher').select('dag_id').where('dag_id', 'in', touched).limit(1).executeTakeFirst())) return;
  await db.transaction().execute(async (trx) => {
    let changed = false;
    const keep: { dagId: string; triggerId: number }[] = [];
    for (const watcher of wanted) {
      const inserted = await trx
        .insertInto('trigger')
        .values({
          classpath: watcher.classpath,
          kwargs: adapter.jsonParam(watcher.kwargs),
          created_at: toDbTime(now),
          triggerer_id: null,
          hash: watcher.hash,
          queue: watcher.queue,
          watcher: 1,
        })
        .onConflict((conflict) => conflict.column('hash').doNothing())
        .returning('id')
        .executeTakeFirst();
      const triggerId = inserted?.id ?? (await trx.selectFrom('trigger').select('id').where('hash', '=', watcher.hash).executeTakeFirstOrThrow()).id;
      const linked = await trx
        .insertInto('dag_watcher')
        .values({ dag_id: watcher.dagId, trigger_id: triggerId })
        .onConflict((conflict) => conflict.columns(['dag_id', 'trigger_id']).doNothing())
        .executeTakeFirst();
      if (inserted || Number(linked.numInsertedOrUpdatedRows ?? 0) > 0) changed = true;
      keep.push({ dagId: watcher.dagId, triggerId });
    }
    const stale =
      named.length === 0
        ? []
        : (await trx.selectFrom('dag_watcher').select(['dag_id', 'trigger_id']).where('dag_id', 'in', named).execute()).filter(
            (link) => !keep.some((kept) => kept.dagId === link.dag_id && kept.triggerId === link.trigger_id),
          );
    for (const link of stale) {
      await trx.deleteFrom('dag_watcher').where('dag_id', '=', link.dag_id).where('trigger_id', '=', link.trigger_id).execute();
      changed = true;
    }
    if (stale.length > 0) {
      await trx
        .deleteFrom('trigger')
        .where(adapter.idIn('id', [...new Set(stale.map((link) => link.trigger_id))]))
        .where('watcher', '=', 1)
        .where(({ not, exists, selectFrom }) =>
          not(exists(selectFrom('dag_watcher').select('dag_watcher.dag_id').whereRef('dag_watcher.trigger_id', '=', 'trigger.id'))),
        )
        .execute();
    }
    if (inactive.length > 0 && (await releaseUnwatched(trx, inactive)) > 0) changed = true;
    if (changed) await wake(trx, adapter, 'triggerer');
  });
}

/** Unowns the running watchers of `dagIds` that no active DAG watches any more: their triggerers stop them. */
async function releaseUnwatched(db: StorageContext['db'], dagIds: readonly string[]): Promise<number> {
  const released = await db
    .updateTable('trigger')
    .set({ triggerer_id: null })
    .where('watcher', '=', 1)
    .where('triggerer_id', 'is not', null)
    .where('id', 'in', (eb) => eb.selectFrom('dag_watcher').select('dag_watcher.trigger_id').where('dag_watcher.dag_id', 'in', dagIds))
    .where((eb) => eb.not(activelyWatched(eb)))
    .executeTakeFirst();
  return Number(released.numUpdatedRows);
}

/**
 * Pauses or unpauses a DAG (not deleted): paused, it gets no scheduled, signal or event runs, and
 * its watchers stop once no active DAG watches them (their rows and cursors kept); unpaused, they
 * are claimed again at once. False when there is no such DAG.
 */
export async function setDagPaused(context: StorageContext, dagId: string, paused: boolean): Promise<boolean> {
  const { db, adapter } = context;
  return db.transaction().execute(async (trx) => {
    const updated = await trx
      .updateTable('serialized_dag')
      .set({ paused: paused ? 1 : 0 })
      .where('dag_id', '=', dagId)
      .where('deleted_at', 'is', null)
      .executeTakeFirst();
    if (Number(updated.numUpdatedRows) !== 1) return false;
    if (paused) await releaseUnwatched(trx, [dagId]);
    // Claims (unpaused), or stops (paused), without waiting for the next pass.
    await wake(trx, adapter, 'triggerer');
    return true;
  });
}
