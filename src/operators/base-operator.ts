import { TaskDeferred, type DeferralRequest } from './task-deferred.ts';

/** What a running task sees of itself. */
export interface TaskInstanceRef {
  readonly id: number;
  readonly dagId: string;
  readonly taskId: string;
  readonly runId: string;
  readonly mapIndex: number;
  readonly tryNumber: number;
}

export interface TaskContext {
  readonly taskInstance: TaskInstanceRef;
}

/**
 * An operator does a task's work in execute(). One that must wait calls this.defer(...),
 * which throws TaskDeferred: the worker records the deferral and frees its slot, and when the
 * trigger fires the task resumes at `method`, called as `method(context, event, kwargs)`.
 */
export abstract class BaseOperator<Context extends TaskContext = TaskContext> {
  abstract execute(context: Context): unknown;

  defer(request: DeferralRequest): never {
    throw new TaskDeferred(request);
  }
}
