import { BaseOperator, type RuntimeContext, type TaskOptions } from 'deferflow';
import { HttpStatusTrigger } from '../triggers/http-status-trigger.ts';

/**
 * Runs a job on an external service exactly once, whatever happens to the worker: the pattern
 * durable task state (`context.state`) is for.
 *
 * execute() submits the job and keeps its id in the task instance's state before anything else
 * can go wrong; then it waits for the service to accept the job and defers until it is done. If
 * the worker dies after the submission (killed, its host lost), the scheduler retries the task,
 * and the retry finds the id in its state and re-attaches to the same job instead of submitting
 * a second one. The service here is a small HTTP API: `POST {serviceUrl}/jobs` answers
 * `{"id": "…"}`, `GET {serviceUrl}/jobs/{id}/accepted` answers once the job has been accepted,
 * and `GET {serviceUrl}/jobs/{id}/done` answers 200 once it is done.
 */
export class RunExternalJob extends BaseOperator {
  readonly serviceUrl: string;

  /** In a DAG: `dag.add(new RunExternalJob({ taskId: 'run_job', serviceUrl: 'https://…', retries: 2 }))`. */
  constructor({ serviceUrl, ...options }: TaskOptions & { serviceUrl: string }) {
    super(options);
    this.serviceUrl = serviceUrl;
  }

  async execute(context: RuntimeContext): Promise<never> {
    let jobId = await context.state.get<string>('job_id');
    if (jobId === undefined) {
      const response = await fetch(`${this.serviceUrl}/jobs`, { method: 'POST', signal: context.signal });
      if (!response.ok) throw new Error(`submitting the job failed: HTTP ${response.status}`);
      jobId = ((await response.json()) as { id: string }).id;
      // Kept before anything else can fail: a retry re-attaches to this job.
      await context.state.set('job_id', jobId);
      context.log.info({ job_id: jobId }, `submitted job ${jobId}`);
    } else {
      context.log.info({ job_id: jobId }, `re-attached to job ${jobId}, submitted by an earlier try`);
    }
    const accepted = await fetch(`${this.serviceUrl}/jobs/${jobId}/accepted`, { signal: context.signal });
    if (!accepted.ok) throw new Error(`job ${jobId} was not accepted: HTTP ${accepted.status}`);
    // The job runs for minutes or hours: the worker slot is handed back while it does.
    return this.defer({
      trigger: new HttpStatusTrigger({ url: `${this.serviceUrl}/jobs/${jobId}/done`, status: 200, pollSeconds: 1 }),
      method: 'onDone',
    });
  }

  async onDone(context: RuntimeContext): Promise<{ jobId: string | undefined; tries: number }> {
    return { jobId: await context.state.get<string>('job_id'), tries: context.taskInstance.tryNumber };
  }
}
