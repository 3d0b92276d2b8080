import { sql } from '../database/kysely.ts';
import { fromDbTime, toDbTime } from '../database/schema.ts';
import { TaskInstanceStateError } from '../vocabulary/errors.ts';
import type { JsonObject } from '../vocabulary/serialization/json.ts';
import type { StorageContext } from './context.ts';
import { describeHolder, lockHolder, stillHeld, type HeldTry } from './held-try.ts';
import { sealedFormOf } from './sealed-values.ts';
import { wake } from './wake.ts';

/** Where a try that asked a question went: waiting for the answer, or resumed at once (it came while the try still ran). */
export type AwaitInputResult = 'awaiting' | 'answered';

/**
 * running → awaiting_input for the try that asked the task instance's question (ask-for-input.ts):
 * its worker slot is free, and no trigger row stands for the wait. next_method and next_kwargs
 * are where it resumes; ready_at is the question's deadline, or the task's execution deadline
 * when that comes first, for the scheduler's sweep (time-out-awaited-input.ts). A response that
 * came while the try still ran (a link clicked as soon as it was sent) is not lost: the task
 * instance goes to scheduled instead, with it as its event. Throws TaskInstanceStateError when
 * the try is no longer held (retried, cleared) or a signal is stopping it, or it asked no
 * question; nothing is written then.
 */
export async function awaitInput(
  { db, adapter, keyring }: StorageContext,
  taskInstanceId: number,
  held: HeldTry,
  resume: { readonly method: string; readonly kwargs: JsonObject },
  now: number,
): Promise<AwaitInputResult> {
  const nextKwargs = adapter.jsonParam(keyring.seal(JSON.stringify(resume.kwargs), 'task_instance.next_kwargs'));
  return db.transaction().execute(async (trx) => {
    const holder = await lockHolder(trx, adapter, taskInstanceId, held);
    if (holder === undefined) throw new TaskInstanceStateError(`task instance ${taskInstanceId} does not exist`);
    if (holder.stop_request !== null)
      throw new TaskInstanceStateError(`task instance ${taskInstanceId} is being stopped by a signal (${holder.stop_request}); it does not wait for input`);
    if (!holder.held)
      throw new TaskInstanceStateError(
        `task instance ${taskInstanceId} is no longer running try ${held.tryNumber} on worker ${held.workerJobId} (it is ${describeHolder(holder)}); that try's wait for input is dropped`,
      );
    const input = await trx
      .selectFrom('task_input')
      .select(['try_number', 'timeout_at', 'responded_at', 'response'])
      .where('task_instance_id', '=', taskInstanceId)
      .executeTakeFirst();
    if (input === undefined || input.try_number !== held.tryNumber)
      throw new TaskInstanceStateError(`task instance ${taskInstanceId}, try ${held.tryNumber}, asked no question to wait for (use awaitInput())`);
    const resumeAt = { next_method: resume.method, next_kwargs: nextKwargs, worker_job_id: null, updated_at: toDbTime(now) };
    if (input.responded_at !== null && input.response !== null) {
      const response = keyring.open(input.response, 'task_input.response', `the question of task instance ${taskInstanceId}`);
      await trx
        // transition: await-input-answered
        .updateTable('task_instance')
        .set({
          state: 'scheduled',
          ...resumeAt,
          next_event: adapter.jsonParam(keyring.seal(response, 'task_instance.next_event', sealedFormOf(adapter, 'task_instance.next_event'))),
          ready_at: null,
        })
        .where('id', '=', taskInstanceId)
        .where('state', '=', 'running')
        .where(stillHeld(held))
        .execute();
      await wake(trx, adapter, 'worker');
      return 'answered';
    }
    const timeoutAt = input.timeout_at === null ? null : toDbTime(fromDbTime(input.timeout_at));
    await trx
      // transition: await-input
      .updateTable('task_instance')
      .set({
        state: 'awaiting_input',
        ...resumeAt,
        next_event: null,
        // The earlier of the question's deadline and the task's execution deadline.
        ready_at:
          timeoutAt === null
            ? sql<string | null>`execution_deadline`
            : sql<string>`case when execution_deadline is not null and execution_deadline < ${timeoutAt} then execution_deadline else ${timeoutAt} end`,
      })
      .where('id', '=', taskInstanceId)
      .where('state', '=', 'running')
      .where(stillHeld(held))
      .execute();
    // The scheduler's sweep: a deadline that may come before the one it sleeps until.
    if (timeoutAt !== null) await wake(trx, adapter, 'scheduler');
    return 'awaiting';
  });
}
