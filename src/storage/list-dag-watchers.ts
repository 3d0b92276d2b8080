import { fromDbTime } from '../database/schema.ts';
import type { StorageContext } from './context.ts';
import { toSchedulerDag } from '../authoring/dags/serialized-dag.ts';
import type { JsonValue } from '../vocabulary/serialization/json.ts';
import { dagEventFilters } from './sync-dag-watchers.ts';

/** A DAG's watcher as `dags list` and the status page show it. */
export interface DagWatcherListing {
  readonly dagId: string;
  readonly triggerId: number;
  readonly classpath: string;
  readonly queue: string;
  /** The triggerer running it; null while unclaimed. */
  readonly triggererId: number | null;
  /** Its cursor (JSON text) as last written; null before its first events. */
  readonly cursor: string | null;
  /** When its events last made runs (epoch ms); null before. */
  readonly lastEventAt: number | null;
  /** The filters the DAG applies to its events (a shared watcher's `match`, see SerializedWatcher.eventFilter); null: every event. */
  readonly eventFilters: JsonValue[] | null;
}

/** The watchers DAGs are scheduled on (of one DAG, or all), by DAG then trigger id. */
export async function listDagWatchers({ db, keyring }: StorageContext, dagId?: string): Promise<DagWatcherListing[]> {
  let query = db
    .selectFrom('dag_watcher')
    .innerJoin('trigger', 'trigger.id', 'dag_watcher.trigger_id')
    .leftJoin('serialized_dag', 'serialized_dag.dag_id', 'dag_watcher.dag_id')
    .select([
      'dag_watcher.dag_id',
      'trigger.id',
      'trigger.classpath',
      'trigger.queue',
      'trigger.triggerer_id',
      'trigger.cursor',
      'trigger.last_event_at',
      'trigger.hash',
      'serialized_dag.data',
      'serialized_dag.hash as dag_hash',
    ])
    .orderBy('dag_watcher.dag_id')
    .orderBy('trigger.id');
  if (dagId !== undefined) query = query.where('dag_watcher.dag_id', '=', dagId);
  return (await query.execute()).map((row) => ({
    dagId: row.dag_id,
    triggerId: row.id,
    classpath: row.classpath,
    queue: row.queue,
    triggererId: row.triggerer_id,
    cursor: row.cursor,
    lastEventAt: row.last_event_at === null ? null : fromDbTime(row.last_event_at),
    eventFilters:
      row.data === null || row.dag_hash === null ? null : dagEventFilters(keyring, toSchedulerDag(row.dag_id, row.data, row.dag_hash).watchSchedule, row.hash),
  }));
}
