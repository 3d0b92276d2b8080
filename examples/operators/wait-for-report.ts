import { Duration } from 'luxon';
import { BaseOperator, type TaskContext, type TaskOptions } from 'deferflow';
import { HttpStatusTrigger } from '../triggers/http-status-trigger.ts';

/**
 * A deferring operator: execute() hands its worker slot back until the report exists, then the
 * task resumes in onReady() with the trigger's event. If the report is not there within two
 * hours, onReady is never called: the task fails with TaskDeferralTimeout.
 */
export class WaitForReport extends BaseOperator {
  readonly reportUrl: string;

  /** In a DAG: `dag.add(new WaitForReport({ taskId: 'wait_for_report', reportUrl: 'https://…' }))`. */
  constructor({ reportUrl, ...options }: TaskOptions & { reportUrl: string }) {
    super(options);
    this.reportUrl = reportUrl;
  }

  execute(_context: TaskContext): never {
    return this.defer({
      trigger: new HttpStatusTrigger({ url: this.reportUrl, status: 200, pollSeconds: 60 }),
      method: 'onReady',
      kwargs: { requestedAt: new Date().toISOString() },
      timeout: Duration.fromObject({ hours: 2 }),
    });
  }

  onReady(context: TaskContext, event: { url: string; status: number }, kwargs: { requestedAt: string }) {
    return { taskInstance: context.taskInstance.id, report: event.url, requestedAt: kwargs.requestedAt };
  }
}
