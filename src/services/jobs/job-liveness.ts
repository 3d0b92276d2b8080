import { SCHEDULER_JOB_TYPE, TRIGGERER_JOB_TYPE, WORKER_JOB_TYPE } from '../../database/schema.ts';
import type { LivenessLocks } from '../../database/liveness-locks.ts';
import type { JobHolder, JobLiveness, JobRowLiveness } from '../../storage/index.ts';

export type Liveness = 'alive' | 'dead' | 'ended';

/**
 * How long each kind of job may go without a heartbeat before its peers judge it dead: a
 * triggerer by the triggerers' --health-check-threshold (its triggers are then released), a
 * worker by the scheduler's --zombie-threshold (its task instances are then retried). A
 * scheduler is judged like a worker.
 */
export interface LivenessThresholds {
  readonly triggererMs: number;
  readonly workerMs: number;
}

/**
 * What a job row means now, as the daemons judge each other (see deadHolders). Its `state` says
 * only what the process last wrote: a process killed with SIGKILL never writes `ended`, so its
 * row says `running` forever; its liveness lock (`lockGone`: see LivenessLocks.gone) and its
 * heartbeat tell.
 */
export function jobLiveness(
  job: { readonly jobType: string; readonly state: string; readonly endDate: number | null; readonly latestHeartbeat: number | null },
  thresholds: LivenessThresholds,
  now: number,
  lockGone = false,
): Liveness {
  if (job.state !== 'running' || job.endDate !== null) return 'ended';
  if (lockGone) return 'dead';
  const thresholdMs = job.jobType === TRIGGERER_JOB_TYPE ? thresholds.triggererMs : thresholds.workerMs;
  return job.latestHeartbeat !== null && now - job.latestHeartbeat <= thresholdMs ? 'alive' : 'dead';
}

/**
 * The liveness of each listed job as the daemons judge it (jobLiveness), their liveness locks
 * tried: what `jobs list`, `jobs check` and the status page show.
 */
export async function judgeJobs(
  jobs: readonly JobRowLiveness[],
  thresholds: LivenessThresholds,
  now: number,
  locks: LivenessLocks,
): Promise<Map<number, Liveness>> {
  const gone = await locks.gone(jobs.filter((job) => job.state === 'running' && job.endDate === null));
  return new Map(jobs.map((job) => [job.id, jobLiveness(job, thresholds, now, gone.has(job.id))]));
}

/** What deadHolders found: who is dead, and when the next of the living would be, by heartbeat alone. */
export interface HolderVerdict {
  readonly dead: number[];
  /**
   * When the oldest heartbeat among the living holders passes the threshold (epoch ms; null: no
   * living holder but `self`). A frozen process keeps its lock, so only its heartbeat tells: a
   * daemon looks again no later than this.
   */
  readonly nextStaleAt: number | null;
}

/**
 * Which holders are dead, so that what they hold goes to the living:
 * - no job row (pruned, or deleted by hand), or a job that ended: at once;
 * - a liveness lock let go (see liveness-locks.ts): its process is gone (killed, or cut off from
 *   the database), recognised at the next look, whatever its heartbeat says;
 * - a heartbeat older than `aliveSince`: alive, perhaps, but not working (frozen, or partitioned
 *   while its session lingers), past the threshold of `thresholdMs`.
 * The locks are only tried for holders the row alone does not condemn; `self` is never dead.
 */
export async function deadHolders(
  holders: readonly JobHolder[],
  aliveSince: number,
  thresholdMs: number,
  locks: LivenessLocks,
  self: number | null,
): Promise<HolderVerdict> {
  const dead: number[] = [];
  const locked: JobLiveness[] = [];
  for (const { id, job } of holders) {
    if (id === self) continue;
    if (job === null || !job.running || job.latestHeartbeat < aliveSince) dead.push(id);
    else if (job.livenessLock !== null) locked.push(job);
  }
  if (locked.length > 0) dead.push(...(await locks.gone(locked)));
  let oldestLiving = Number.POSITIVE_INFINITY;
  for (const { id, job } of holders) if (job !== null && id !== self && !dead.includes(id)) oldestLiving = Math.min(oldestLiving, job.latestHeartbeat);
  return { dead, nextStaleAt: Number.isFinite(oldestLiving) ? oldestLiving + thresholdMs : null };
}

/** The job types by the names the CLI uses. */
export const JOB_TYPES = { triggerer: TRIGGERER_JOB_TYPE, worker: WORKER_JOB_TYPE, scheduler: SCHEDULER_JOB_TYPE } as const;
