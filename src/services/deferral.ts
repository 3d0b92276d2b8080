import type { Database } from '../database/connect.ts';
import { TaskInstanceStateError } from '../vocabulary/errors.ts';
import { type BaseOperator, type TaskContext, callNextMethod } from '../authoring/operators/base-operator.ts';
import type { TaskDeferred } from '../authoring/operators/task-deferred.ts';
import { type DeferResult, openStores } from '../storage/index.ts';

/**
 * Records a deferral: in one transaction the trigger row is inserted (or an identical unfired
 * one is joined) and the task instance becomes deferred with next_method, next_kwargs,
 * trigger_id and trigger_timeout. Call it with the TaskDeferred an operator threw.
 */
export function deferTaskInstance(
  database: Pick<Database, 'db' | 'adapter'>,
  taskInstanceId: number,
  deferral: TaskDeferred,
  now = Date.now(),
): Promise<DeferResult> {
  return openStores(database).taskInstances.deferTaskInstance(taskInstanceId, deferral, now);
}

/** States a resumed task instance may be in: scheduled by the triggerer, or picked up by a worker. */
const RESUMABLE_STATES = ['scheduled', 'queued', 'running'];

/**
 * Resumes a task instance the triggerer moved back to scheduled: calls its operator's
 * next_method as `method(context, event, kwargs)` and returns what it returns (a TaskDeferred
 * it throws propagates, to be recorded with deferTaskInstance). For the failure marker it
 * throws TaskDeferralTimeout (the deferral timed out) or TaskDeferralError (the trigger failed)
 * carrying the trigger's error text and traceback.
 */
export async function resumeTaskInstance<Context extends TaskContext>(
  database: Pick<Database, 'db' | 'adapter'>,
  taskInstanceId: number,
  operator: BaseOperator<Context>,
  context: Context,
): Promise<unknown> {
  const ti = await openStores(database).taskInstances.readResumeState(taskInstanceId);
  if (!ti) throw new TaskInstanceStateError(`task instance ${taskInstanceId} does not exist`);
  if (ti.nextMethod === null) {
    throw new TaskInstanceStateError(`task instance ${taskInstanceId} has no next_method: it is not resuming from a deferral`);
  }
  if (ti.state === null || !RESUMABLE_STATES.includes(ti.state)) {
    throw new TaskInstanceStateError(`task instance ${taskInstanceId} is ${ti.state ?? 'in no state'}; it resumes once scheduled`);
  }
  return callNextMethod(operator, context, ti.nextMethod, ti.nextKwargsJson);
}
