import { fromDbTime, toDbTime } from '../database/schema.ts';
import { toSchedulerDag } from '../authoring/dags/serialized-dag.ts';
import { DatabaseError } from '../vocabulary/errors.ts';
import type { JsonValue } from '../vocabulary/serialization/json.ts';
import type { StorageContext } from './context.ts';
import { insertDagRuns } from './create-dag-run.ts';
import { dagEventFilters } from './sync-dag-watchers.ts';
import { matches } from '../authoring/triggers/signal-trigger.ts';
import type { SchedulerDag } from '../model/scheduler-dag.ts';

/** A watcher's batch as the triggerer hands it over: its events (payloads as JSON text) and the cursor after them. */
export interface WatchBatch {
  readonly triggerId: number;
  readonly classpath: string;
  readonly events: readonly { readonly key: string; readonly payloadJson: string }[];
  readonly cursorJson: string;
}

/** What recording a batch did: runs made, or nothing because the watcher is no longer this triggerer's. */
export type WatchBatchResult = { readonly kind: 'written'; readonly runs: number } | { readonly kind: 'lost' };

/** The run id an event's key makes: the same key never makes a second run of a DAG. */
export function eventRunId(key: string): string {
  return `event__${key}`;
}

/**
 * In one transaction, for a watcher that triggerer `ownerJobId` owns: its cursor (and when it last
 * made runs), and one run of every DAG watching it (not deleted) per event, with run id
 * `event__<key>` (an event already made into a run, delivered again, makes none; a paused DAG
 * gets none), run type
 * `event`, conf `{ event: { key, payload, trigger: { id, classpath } } }`. Ownership is checked
 * first, by the cursor's update, which row-locks the watcher on PostgreSQL: a watcher taken over
 * meanwhile (this triggerer was thought dead) writes nothing, so its events are the new owner's,
 * from the cursor written last. Logical dates follow the DAG's latest, a millisecond apart.
 */
export async function recordWatchEvents(context: StorageContext, batch: WatchBatch, ownerJobId: number, now: number): Promise<WatchBatchResult> {
  const { db, adapter } = context;
  return db.transaction().execute(async (trx): Promise<WatchBatchResult> => {
    const owned = await trx
      .updateTable('trigger')
      .set({ cursor: adapter.jsonParam(batch.cursorJson), ...(batch.events.length > 0 ? { last_event_at: toDbTime(now) } : {}) })
      .where('id', '=', batch.triggerId)
      .where('triggerer_id', '=', ownerJobId)
      .where('watcher', '=', 1)
      .returning('hash')
      .executeTakeFirst();
    if (owned === undefined) return { kind: 'lost' };
    if (batch.events.length === 0) return { kind: 'written', runs: 0 };
    const dags = await trx
      .selectFrom('dag_watcher')
      .innerJoin('serialized_dag', 'serialized_dag.dag_id', 'dag_watcher.dag_id')
      .select(['serialized_dag.dag_id', 'serialized_dag.data', 'serialized_dag.hash'])
      .where('dag_watcher.trigger_id', '=', batch.triggerId)
      .where('serialized_dag.deleted_at', 'is', null)
      // A paused DAG misses the events that come while it is paused (as Airflow's paused DAGs do).
      .where('serialized_dag.paused', '=', 0)
      .orderBy('serialized_dag.dag_id')
      .execute();
    let runs = 0;
    const parsed = batch.events.map((event) => ({ key: event.key, payload: JSON.parse(event.payloadJson) as JsonValue }));
    for (const row of dags) {
      const dag = toSchedulerDag(row.dag_id, row.data, row.hash);
      // A DAG whose filters take none of the batch costs no statement.
      const events = eventsOf(dag, parsed, owned.hash, context.keyring);
      if (events.length === 0) continue;
      const latest = await trx
        .selectFrom('dag_run')
        .select((eb) => eb.fn.max('logical_date').as('at'))
        .where('dag_id', '=', dag.dagId)
        .executeTakeFirst();
      const firstDate = Math.max(now, latest?.at == null ? 0 : fromDbTime(latest.at) + 1);
      const wanted = events.map((event, index) => ({
        runId: eventRunId(event.key),
        runType: 'event' as const,
        logicalDate: firstDate + index,
        conf: { event: { key: event.key, payload: event.payload, trigger: { id: batch.triggerId, classpath: batch.classpath } } },
      }));
      const made = await insertDagRuns({ ...context, db: trx }, dag, wanted, now);
      runs += made.size;
      if (made.size === wanted.length) continue;
      // Not made: an event's run is there already (delivered again), or a peer's write took its logical date.
      const notMade = wanted.filter((run) => !made.has(run.runId)).map((run) => run.runId);
      const existing = new Set(
        (await trx.selectFrom('dag_run').select('run_id').where('dag_id', '=', dag.dagId).where('run_id', 'in', notMade).execute()).map(
          (found) => found.run_id,
        ),
      );
      const lost = notMade.find((runId) => !existing.has(runId));
      if (lost !== undefined) throw new DatabaseError(`DAG ${dag.dagId}: a logical date was taken while run ${lost} was made; written again`);
    }
    return { kind: 'written', runs };
  });
}

/** The events (payloads parsed, once for every DAG) that make runs of `dag`: those its event filters on the batch's row accept (see dagEventFilters). */
function eventsOf<E extends { readonly payload: JsonValue }>(
  dag: SchedulerDag,
  events: readonly E[],
  rowHash: string | null,
  keyring: StorageContext['keyring'],
): readonly E[] {
  const filters = dagEventFilters(keyring, dag.watchSchedule, rowHash);
  return filters === null ? events : events.filter((event) => filters.some((filter) => matches(event.payload, filter)));
}
