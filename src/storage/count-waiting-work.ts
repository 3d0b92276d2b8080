import type { StorageContext } from './context.ts';

export interface WaitingWorkCounts {
  readonly deferredTaskInstances: number;
  /** Task instances awaiting a person's input. */
  readonly awaitingInput: number;
  /** Unfinished DAG runs by state. */
  readonly dagRuns: { readonly queued: number; readonly running: number };
}

/**
 * What waits, counted for the metrics gauges: deferred task instances, those awaiting input, and unfinished DAG runs by
 * state (finished runs are counted as they finish, by the scheduler, not scanned here). The run
 * count reads the unfinished-runs index only.
 */
export async function countWaitingWork({ db }: StorageContext): Promise<WaitingWorkCounts> {
  const countIn = (state: 'deferred' | 'awaiting_input') =>
    db
      .selectFrom('task_instance')
      .select((eb) => eb.fn.countAll().as('n'))
      .where('state', '=', state)
      .executeTakeFirstOrThrow();
  const [deferred, awaiting, runs] = await Promise.all([
    countIn('deferred'),
    countIn('awaiting_input'),
    db
      .selectFrom('dag_run')
      .select(['state', (eb) => eb.fn.countAll().as('n')])
      .where('state', 'in', ['queued', 'running'])
      .groupBy('state')
      .execute(),
  ]);
  const runsIn = (state: string) => Number(runs.find((row) => row.state === state)?.n ?? 0);
  return { deferredTaskInstances: Number(deferred.n), awaitingInput: Number(awaiting.n), dagRuns: { queued: runsIn('queued'), running: runsIn('running') } };
}

/** Trigger rows, whoever owns them. */
export async function countTriggers({ db }: StorageContext): Promise<number> {
  const row = await db
    .selectFrom('trigger')
    .select((eb) => eb.fn.countAll().as('n'))
    .executeTakeFirstOrThrow();
  return Number(row.n);
}
