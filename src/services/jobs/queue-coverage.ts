import { TRIGGERER_JOB_TYPE, WORKER_JOB_TYPE } from '../../database/schema.ts';
import type { LivenessLocks } from '../../database/liveness-locks.ts';
import { DEFAULT_QUEUE, queueSetOf } from '../../model/queues.ts';
import type { Stores } from '../../storage/index.ts';
import { judgeJobs, type LivenessThresholds } from './job-liveness.ts';

/** One queue's claimable work and the live daemons that would claim it. */
export interface QueueCoverage {
  /** The queue's name (`default` for work that names none). */
  readonly queue: string;
  /** Scheduled task instances in it, and the live workers serving it (their job ids). */
  readonly scheduledTaskInstances: number;
  readonly liveWorkers: readonly number[];
  /** Unowned triggers in it, and the live triggerers serving it. */
  readonly unownedTriggers: number;
  readonly liveTriggerers: readonly number[];
}

/** Work that waits in a queue no live daemon of the kind that would claim it serves. */
export interface UnservedWork {
  readonly queue: string;
  /** What waits: `task_instances` (no live worker serves the queue) or `triggers` (no live triggerer). */
  readonly kind: 'task_instances' | 'triggers';
  readonly count: number;
}

/**
 * Every queue that has work or a live worker or triggerer serving it, judged as the daemons judge
 * each other (see judgeJobs): a queue whose work no live daemon serves waits until one starts with
 * `--queues` naming it. Sorted by name, `default` first.
 */
export async function readQueueCoverage(
  storage: Pick<Stores, 'jobs'>,
  locks: LivenessLocks,
  thresholds: LivenessThresholds,
  now: number,
): Promise<QueueCoverage[]> {
  const [work, servers] = await Promise.all([storage.jobs.queueWork(), storage.jobs.queueServers([WORKER_JOB_TYPE, TRIGGERER_JOB_TYPE])]);
  const liveness = await judgeJobs(servers, thresholds, now, locks);
  const live = servers.filter((job) => liveness.get(job.id) === 'alive').map((job) => ({ ...job, serving: queueSetOf(job.queues ?? '') }));
  const queues = new Set<string>([...work.map((entry) => entry.queue), ...live.flatMap((job) => job.serving)]);
  const servedBy = (jobType: string, queue: string) => live.filter((job) => job.jobType === jobType && job.serving.includes(queue)).map((job) => job.id);
  return [...queues]
    .sort((a, b) => (a === DEFAULT_QUEUE ? -1 : b === DEFAULT_QUEUE ? 1 : a < b ? -1 : a > b ? 1 : 0))
    .map((queue) => {
      const counts = work.find((entry) => entry.queue === queue);
      return {
        queue,
        scheduledTaskInstances: counts?.scheduledTaskInstances ?? 0,
        liveWorkers: servedBy(WORKER_JOB_TYPE, queue),
        unownedTriggers: counts?.unownedTriggers ?? 0,
        liveTriggerers: servedBy(TRIGGERER_JOB_TYPE, queue),
      };
    });
}

/** The work in `coverage` that no live daemon serves. */
export function unservedWork(coverage: readonly QueueCoverage[]): UnservedWork[] {
  return coverage.flatMap((entry): UnservedWork[] => [
    ...(entry.scheduledTaskInstances > 0 && entry.liveWorkers.length === 0
      ? [{ queue: entry.queue, kind: 'task_instances' as const, count: entry.scheduledTaskInstances }]
      : []),
    ...(entry.unownedTriggers > 0 && entry.liveTriggerers.length === 0
      ? [{ queue: entry.queue, kind: 'triggers' as const, count: entry.unownedTriggers }]
      : []),
  ]);
}

/** One line for people: `queue gpu: 3 scheduled task instance(s) and no live worker serving it`. */
export function describeUnserved(work: UnservedWork): string {
  return work.kind === 'task_instances'
    ? `queue ${work.queue}: ${work.count} scheduled task instance(s) and no live worker serving it (start one with --queues ${work.queue})`
    : `queue ${work.queue}: ${work.count} unclaimed trigger(s) and no live triggerer serving it (start one with --queues ${work.queue})`;
}
