import { SCHEDULER_JOB_TYPE, TRIGGERER_JOB_TYPE, WORKER_JOB_TYPE } from '../../database/schema.ts';

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
 * What a job row means now. Its `state` says only what the process last wrote: a process killed
 * with SIGKILL never writes `ended`, so its row says `running` forever; the heartbeat tells.
 */
export function jobLiveness(
  job: { readonly jobType: string; readonly state: string; readonly endDate: number | null; readonly latestHeartbeat: number | null },
  thresholds: LivenessThresholds,
  now: number,
): Liveness {
  if (job.state !== 'running' || job.endDate !== null) return 'ended';
  const thresholdMs = job.jobType === TRIGGERER_JOB_TYPE ? thresholds.triggererMs : thresholds.workerMs;
  return job.latestHeartbeat !== null && now - job.latestHeartbeat <= thresholdMs ? 'alive' : 'dead';
}

/** The job types by the names the CLI uses. */
export const JOB_TYPES = { triggerer: TRIGGERER_JOB_TYPE, worker: WORKER_JOB_TYPE, scheduler: SCHEDULER_JOB_TYPE } as const;
