import type { StorageContext } from './context.ts';
import { endJob, heartbeatJob, registerJob, type JobFields } from './jobs.ts';
import { listJobs, type JobFilter, type JobListing } from './list-jobs.ts';

/** Jobs: registerJob, heartbeatJob, endJob, listJobs. */
export class JobStore {
  readonly #context: StorageContext;

  constructor(context: StorageContext) {
    this.#context = context;
  }

  registerJob(fields: JobFields, now = Date.now()): Promise<number> {
    return registerJob(this.#context, fields, now);
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
}
