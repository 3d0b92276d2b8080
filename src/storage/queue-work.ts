import { fromDbTime } from '../database/schema.ts';
import type { StorageContext } from './context.ts';
import type { JobRowLiveness } from './list-jobs.ts';

/** Work waiting in one queue for a daemon to claim it. */
export interface QueueWork {
  readonly queue: string;
  /** Scheduled task instances in it, for a worker to claim. */
  readonly scheduledTaskInstances: number;
  /** Unowned (and not quarantined) triggers in it, for a triggerer to claim. */
  readonly unownedTriggers: number;
}

/** A worker's or triggerer's running job row, with the queues it serves. */
export interface QueueServer extends JobRowLiveness {
  /** As --queues took them (`default,gpu`); null: `default` only (a daemon from before queues). */
  readonly queues: string | null;
}

/**
 * The queues that have claimable work, with how much of each kind: scheduled task instances and
 * unowned triggers, counted by queue. Each count reads its claim index only (it leads with the
 * queue: migration 0017), so work piled up anywhere costs one index scan, not a table scan.
 */
export async function queueWork({ db }: StorageContext): Promise<QueueWork[]> {
  const [taskInstances, triggers] = await Promise.all([
    db
      .selectFrom('task_instance')
      .select(['queue', (eb) => eb.fn.countAll().as('n')])
      .where('state', '=', 'scheduled')
      .groupBy('queue')
      .execute(),
    db
      .selectFrom('trigger')
      .select(['queue', (eb) => eb.fn.countAll().as('n')])
      .where('triggerer_id', 'is', null)
      .where('quarantined_at', 'is', null)
      .groupBy('queue')
      .execute(),
  ]);
  const byQueue = new Map<string, { scheduledTaskInstances: number; unownedTriggers: number }>();
  const entry = (queue: string) => {
    if (!byQueue.has(queue)) byQueue.set(queue, { scheduledTaskInstances: 0, unownedTriggers: 0 });
    return byQueue.get(queue)!;
  };
  for (const row of taskInstances) entry(row.queue).scheduledTaskInstances = Number(row.n);
  for (const row of triggers) entry(row.queue).unownedTriggers = Number(row.n);
  return [...byQueue].map(([queue, counts]) => ({ queue, ...counts }));
}

/** The job rows still saying running of the kinds that claim from queues (workers, triggerers). */
export async function queueServers({ db }: StorageContext, jobTypes: readonly string[]): Promise<QueueServer[]> {
  const rows = await db
    .selectFrom('job')
    .select(['id', 'job_type', 'state', 'end_date', 'latest_heartbeat', 'liveness_lock', 'queues'])
    .where('state', '=', 'running')
    .where('end_date', 'is', null)
    .where('job_type', 'in', jobTypes)
    .execute();
  return rows.map((row) => ({
    id: row.id,
    jobType: row.job_type,
    state: row.state,
    endDate: null,
    latestHeartbeat: fromDbTime(row.latest_heartbeat),
    livenessLock: row.liveness_lock,
    queues: row.queues,
  }));
}
