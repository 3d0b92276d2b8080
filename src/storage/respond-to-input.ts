import { fromDbTime, toDbTime } from '../database/schema.ts';
import { checkAnswer, type InputQuestion, type InputResponse, type InputSource } from '../model/human-input.ts';
import { InputAlreadyGivenError, InputLinkInvalidError, NotAwaitingInputError } from '../vocabulary/errors.ts';
import type { JsonObject } from '../vocabulary/serialization/json.ts';
import type { StorageContext } from './context.ts';
import { sealedFormOf } from './sealed-values.ts';
import { wake } from './wake.ts';

/** A response as given: to which task instance (and, from a link, which question), what, by whom, how. */
export interface GivenResponse {
  readonly taskInstanceId: number;
  /** From a signed link: the try and question it was made for; a link for another is refused. */
  readonly link?: { readonly tryNumber: number; readonly nonce: string };
  readonly chosen: readonly string[];
  readonly values: JsonObject;
  readonly by: string;
  readonly source: Exclude<InputSource, 'timeout'>;
}

/**
 * Records the first response to a task instance's question and moves it awaiting_input →
 * scheduled, the response as its event, in one transaction under the task instance's row lock
 * (the lock a try asking, waiting or being cleared takes too), so of two responses racing exactly
 * one wins. One that comes while the asking try still runs (its link was sent before it began to
 * wait) is recorded, and the try resumes as soon as it waits (await-input.ts).
 *
 * Refused, changing nothing: a response that does not answer the question
 * (DF_INVALID_INPUT_RESPONSE); a second one (DF_INPUT_ALREADY_GIVEN, naming who gave the first
 * and when); one from a link made for a question no longer asked, another try's, or a cleared or
 * ended task instance (DF_INPUT_LINK_INVALID); one for a task instance asking nothing
 * (DF_NOT_AWAITING_INPUT).
 */
export async function respondToInput({ db, adapter, keyring }: StorageContext, given: GivenResponse, now: number): Promise<InputResponse> {
  const label = `task instance ${given.taskInstanceId}`;
  return db.transaction().execute(async (trx) => {
    const ti = await adapter
      .lockForUpdate(trx.selectFrom('task_instance').select(['state', 'try_number']).where('id', '=', given.taskInstanceId))
      .executeTakeFirst();
    const input = await trx
      .selectFrom('task_input')
      .select(['try_number', 'nonce', 'question', 'timeout_at', 'responded_at', 'responded_by'])
      .where('task_instance_id', '=', given.taskInstanceId)
      .executeTakeFirst();
    const stale = (why: string) =>
      given.link
        ? new InputLinkInvalidError(`this link is no longer valid: ${why}; nothing was recorded`, 'stale')
        : new NotAwaitingInputError(`${label} ${why}`);
    if (ti === undefined) throw stale(`${label} does not exist`);
    if (input === undefined) throw stale(`${label} is not awaiting input (it is ${ti.state ?? 'in no state'}, and asks no question)`);
    if (given.link && (given.link.tryNumber !== input.try_number || given.link.nonce !== input.nonce))
      throw stale(`it was made for an earlier question of ${label} (try ${given.link.tryNumber}); it asks another now`);
    if (input.responded_at !== null) {
      const at = fromDbTime(input.responded_at);
      throw new InputAlreadyGivenError(
        `${label}'s question was answered already, by ${input.responded_by} at ${new Date(at).toISOString()}; the first response wins, and this one was not recorded`,
        input.responded_by ?? 'unknown',
        at,
      );
    }
    // Asked by this try: waiting, or (its link sent before it began to wait) still running.
    const asking = ti.try_number === input.try_number && (ti.state === 'awaiting_input' || ti.state === 'running');
    if (!asking) throw stale(`${label} is no longer awaiting input (it is ${ti.state ?? 'in no state'}, try ${ti.try_number})`);
    if (input.timeout_at !== null && fromDbTime(input.timeout_at) <= now)
      throw stale(`the question of ${label} timed out at ${new Date(fromDbTime(input.timeout_at)).toISOString()}`);
    const question = JSON.parse(input.question) as InputQuestion;
    const answer = checkAnswer(question, { chosen: given.chosen, values: given.values });
    const response: InputResponse = { ...answer, by: given.by, at: new Date(now).toISOString(), source: given.source };
    await recordResponse({ db: trx, adapter, keyring }, given.taskInstanceId, response, now);
    return response;
  });
}

/**
 * Writes a response (a person's, or the defaults at the deadline) into the question's row and,
 * when the task instance waits for it, moves it awaiting_input → scheduled with the response as
 * its event, waking the workers. Inside the caller's transaction, the task instance's row locked.
 */
export async function recordResponse({ db, adapter, keyring }: StorageContext, taskInstanceId: number, response: InputResponse, now: number): Promise<void> {
  const json = JSON.stringify(response);
  await db
    .updateTable('task_input')
    .set({
      responded_at: toDbTime(now),
      responded_by: response.by,
      response_source: response.source,
      response: adapter.jsonParam(keyring.seal(json, 'task_input.response')),
    })
    .where('task_instance_id', '=', taskInstanceId)
    .where('responded_at', 'is', null)
    .execute();
  const resumed = await db
    // transition: respond
    .updateTable('task_instance')
    .set({
      state: 'scheduled',
      next_event: adapter.jsonParam(keyring.seal(json, 'task_instance.next_event', sealedFormOf(adapter, 'task_instance.next_event'))),
      ready_at: null,
      updated_at: toDbTime(now),
    })
    .where('id', '=', taskInstanceId)
    .where('state', '=', 'awaiting_input')
    .executeTakeFirst();
  if (Number(resumed.numUpdatedRows) > 0) await wake(db, adapter, 'worker');
}
