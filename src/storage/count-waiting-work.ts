import { sql } from '../database/kysely.ts';
import type { StorageContext } from './context.ts';

export interface WaitingWorkCounts {
  readonly deferredTaskInstances: number;
  /** Task instances awaiting a person's input. */
  readonly awaitingInput: number;
  /** Unfinished DAG runs by state. */
  readonly dagRuns: { readonly queued: number; readonly running: number };
}

/**
 * What waits, counted for the metrics gauges, the status page and the scheduler's samples:
 * deferred task instances, those awaiting input, and unfinished DAG runs by state (finished runs
 * are counted as they finish, by the scheduler, not scanned here). Each count reads an index only.
 */
export async function countWaitingWork({ db }: StorageContext): Promise<WaitingWorkCounts> {
  // One statement, each count on its own index: an idle scheduler samples these every minute and
  // the metrics read them on every scrape, so they are one statement to the server, not four.
  const row = await db
    .selectNoFrom((eb) => {
      const tasksIn = (state: 'deferred' | 'awaiting_input') =>
        eb
          .selectFrom('task_instance')
          .select((count) => count.fn.countAll().as('n'))
          .where('state', '=', state);
      // The unfinished-runs index is partial: SQLite takes it only for a condition that names its
      // own, written out (a bound parameter proves nothing when the statement is prepared).
      const runsIn = (state: 'queued' | 'running') =>
        eb
          .selectFrom('dag_run')
          .select((count) => count.fn.countAll().as('n'))
          .where(sql<boolean>`state in ('queued', 'running')`)
          .where('state', '=', sql.lit(state));
      return [tasksIn('deferred').as('deferred'), tasksIn('awaiting_input').as('awaiting'), runsIn('queued').as('queued'), runsIn('running').as('running')];
    })
    .executeTakeFirstOrThrow();
  return {
    deferredTaskInstances: Number(row.deferred),
    awaitingInput: Number(row.awaiting),
    dagRuns: { queued: Number(row.queued), running: Number(row.running) },
  };
}

/** Trigger rows, whoever owns them. */
export async function countTriggers({ db }: StorageContext): Promise<number> {
  const row = await db
    .selectFrom('trigger')
    .select((eb) => eb.fn.countAll().as('n'))
    .executeTakeFirstOrThrow();
  return Number(row.n);
}
