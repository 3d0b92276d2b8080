import type { StorageContext } from './context.ts';
import { endJob, heartbeatJob, listRunningJobs, registerJob, setLivenessLock, type JobFields, type JobLiveness } from './jobs.ts';
import { listJobs, type JobFilter, type JobListing } from './list-jobs.ts';
import { queueServers, queueWork, type QueueServer, type QueueWork } from './queue-work.ts';
import { listDaemonSamples, recordDaemonSample, type DaemonSample } from './daemon-samples.ts';

/** Jobs: registerJob, setLivenessLock, heartbeatJob, endJob, listRunningJobs, listJobs, queueWork, queueServers, recordDaemonSample, listDaemonSamples. */
export class JobStore {
  readonly #context: StorageContext;

  constructor(context: StorageContext) {
    this.#context = context;
  }

  registerJob(fields: JobFields, now = Date.now()): Promise<number> {
    return registerJob(this.#context, fields, now);
  }

  setLivenessLock(jobId: number, lock: string): Promise<void> {
    return setLivenessLock(this.#context, jobId, lock);
  }

  listRunningJobs(jobType?: string): Promise<JobLiveness[]> {
    return listRunningJobs(this.#context, jobType);
  }

  heartbeatJob(jobId: number, now = Date.now()): Promise<void> {
    return heartbeatJob(this.#context, jobId, now);
  }

  endJob(jobId: number, state: 'success' | 'failed', now = Date.now()): Promise<void> {
    return endJob(this.#context, jobId, state, now);
  }

  listJobs(filter: JobFilter): Promise<JobListing[]> {
    return listJobs(this.#context, filter);
  }

  queueWork(): Promise<QueueWork[]> {
    return queueWork(this.#context);
  }

  queueServers(jobTypes: readonly string[]): Promise<QueueServer[]> {
    return queueServers(this.#context, jobTypes);
  }

  /** Records a daemon's figures now; deletes every daemon's samples from before `pruneBefore` when given. */
  recordDaemonSample(
    sample: { readonly jobId: number; readonly jobType: string; readonly figures: Readonly<Record<string, number>> },
    now = Date.now(),
    pruneBefore?: number,
  ): Promise<void> {
    return recordDaemonSample(this.#context, sample, now, pruneBefore);
  }

  /** Every daemon's samples since `since`, by daemon, oldest first; at most `limit`. */
  listDaemonSamples(since: number, limit: number): Promise<DaemonSample[]> {
    return listDaemonSamples(this.#context, since, limit);
  }
}
