import { fromDbTime, toDbTime } from '../database/schema.ts';
import { TRIGGER_FAILURE_METHOD, type FailureKwargs } from '../model/failure-marker.ts';
import { timeoutResponse, type InputQuestion } from '../model/human-input.ts';
import type { StorageContext } from './context.ts';
import { recordResponse } from './respond-to-input.ts';
import { wake } from './wake.ts';

/** What a sweep did: questions answered by their defaults, and tasks failed for want of them. */
export interface InputTimeouts {
  readonly answeredByDefaults: number;
  readonly failed: number;
}

/** Questions handled per sweep: more wait for the next pass, which comes at once (ready_at is still due). */
const SWEEP_LIMIT = 500;

/**
 * The scheduler's sweep of questions past their deadline (task instances awaiting_input whose
 * ready_at passed): the question's defaults answer it, recorded as given by `timeout`, and the
 * task resumes with them; with no defaults (or the task's execution deadline come first), it
 * resumes at the failure marker and fails with DF_INPUT_TIMEOUT. Each in its own transaction under
 * the task instance's row lock, so a person's response racing the deadline either wins whole or
 * is refused as too late; several schedulers may sweep at once.
 */
export async function timeOutAwaitedInput({ db, adapter, keyring }: StorageContext, now: number): Promise<InputTimeouts> {
  const due = await db
    .selectFrom('task_instance')
    .select('id')
    .where('state', '=', 'awaiting_input')
    .where('ready_at', '<=', toDbTime(now))
    .orderBy('ready_at')
    .limit(SWEEP_LIMIT)
    .execute();
  let answeredByDefaults = 0;
  let failed = 0;
  for (const { id } of due) {
    const outcome = await db.transaction().execute(async (trx) => {
      const ti = await adapter
        .lockForUpdate(
          trx.selectFrom('task_instance').select('id').where('id', '=', id).where('state', '=', 'awaiting_input').where('ready_at', '<=', toDbTime(now)),
        )
        .executeTakeFirst();
      if (ti === undefined) return null; // answered, cleared or swept meanwhile
      const input = await trx.selectFrom('task_input').select(['question', 'timeout_at']).where('task_instance_id', '=', id).executeTakeFirst();
      const question = input ? (JSON.parse(input.question) as InputQuestion) : null;
      const ownDeadlinePassed = input?.timeout_at != null && fromDbTime(input.timeout_at) <= now;
      const byDefaults = question && ownDeadlinePassed ? timeoutResponse(question, now) : null;
      if (byDefaults) {
        await recordResponse({ db: trx, adapter, keyring }, id, byDefaults, now);
        return 'defaults' as const;
      }
      const failure: FailureKwargs = {
        code: 'DF_INPUT_TIMEOUT',
        reason: 'input_timeout',
        error: ownDeadlinePassed
          ? `no response to "${question?.subject}" came by ${new Date(fromDbTime(input!.timeout_at!)).toISOString()}, and the question has no defaults to answer it`
          : `the task's execution timeout passed while it awaited input ("${question?.subject ?? 'a question'}")`,
        traceback: null,
      };
      await trx
        // transition: input-time-out
        .updateTable('task_instance')
        .set({
          state: 'scheduled',
          next_method: TRIGGER_FAILURE_METHOD,
          next_kwargs: adapter.jsonParam(keyring.seal(JSON.stringify(failure), 'task_instance.next_kwargs')),
          next_event: null,
          ready_at: null,
          updated_at: toDbTime(now),
        })
        .where('id', '=', id)
        .where('state', '=', 'awaiting_input')
        .execute();
      await wake(trx, adapter, 'worker');
      return 'failed' as const;
    });
    if (outcome === 'defaults') answeredByDefaults++;
    if (outcome === 'failed') failed++;
  }
  return { answeredByDefaults, failed };
}
