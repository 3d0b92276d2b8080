import type { StorageContext } from './context.ts';

export interface WaitingWorkCounts {
  readonly deferredTaskInstances: number;
  /** Unfinished DAG runs by state. */
  readonly dagRuns: { readonly queued: number; readonly running: number };
}

/**
 * What waits, counted for the metrics gauges: deferred task instances, and unfinished DAG runs by
 * state (finished runs are counted as they finish, by the scheduler, not scanned here). The run
 * count reads the unfinished-runs index only.
 */
export async function countWaitingWork({ db }: StorageContext): Promise<WaitingWorkCounts> {
  const [deferred, runs] = await Promise.all([
    db
      .selectFrom('task_instance')
      .select((eb) => eb.fn.countAll().as('n'))
      .where('state', '=', 'deferred')
      .executeTakeFirstOrThrow(),
    db
      .selectFrom('dag_run')
      .select(['state', (eb) => eb.fn.countAll().as('n')])
      .where('state', 'in', ['queued', 'running'])
      .groupBy('state')
      .execute(),
  ]);
  const runsIn = (state: string) => Number(runs.find((row) => row.state === state)?.n ?? 0);
  return { deferredTaskInstances: Number(deferred.n), dagRuns: { queued: runsIn('queued'), running: runsIn('running') } };
}

/** Trigger rows, whoever owns them. */
export async function countTriggers({ db }: StorageContext): Promise<number> {
  const row = await db
    .selectFrom('trigger')
    .select((eb) => eb.fn.countAll().as('n'))
    .executeTakeFirstOrThrow();
  return Number(row.n);
}
