import { randomBytes } from 'node:crypto';
import { toDbTime } from '../database/schema.ts';
import type { InputQuestion } from '../model/human-input.ts';
import type { StorageContext } from './context.ts';
import { describeHolder, lockHolder, type HeldTry } from './held-try.ts';

/** The question as asked: what its links carry. */
export interface AskedInput {
  readonly taskInstanceId: number;
  readonly tryNumber: number;
  /** Random, new with each question: a link for a replaced question no longer matches. */
  readonly nonce: string;
  /** When the defaults apply (epoch ms); null: no timeout. */
  readonly timeoutAt: number | null;
}

export type AskResult = { readonly asked: AskedInput } | { readonly asked: null; readonly now: string };

/**
 * Records the question a running try asks a person, before the try waits on it: a response
 * may come as soon as the link is sent (by the task's onAwaitingInput hook, while the try still
 * runs), and it is kept (respond-to-input.ts); the try then resumes at once (await-input.ts).
 * Replaces the task instance's previous question, answered or not: its links are refused from
 * now on. Only the try that holds the task instance asks (see held-try.ts): one retried or
 * cleared meanwhile asks nothing.
 */
export async function askForInput(
  { db, adapter }: StorageContext,
  ask: { readonly taskInstanceId: number; readonly held: HeldTry; readonly question: InputQuestion; readonly timeoutMs: number | null },
  now: number,
): Promise<AskResult> {
  const nonce = randomBytes(16).toString('base64url');
  const timeoutAt = ask.timeoutMs === null ? null : now + ask.timeoutMs;
  const values = {
    try_number: ask.held.tryNumber,
    nonce,
    question: adapter.jsonParam(JSON.stringify(ask.question)),
    asked_at: toDbTime(now),
    timeout_at: timeoutAt === null ? null : toDbTime(timeoutAt),
    responded_at: null,
    responded_by: null,
    response_source: null,
    response: null,
  };
  return db.transaction().execute(async (trx) => {
    const holder = await lockHolder(trx, adapter, ask.taskInstanceId, ask.held);
    if (holder === undefined) return { asked: null, now: 'deleted' };
    if (!holder.held) return { asked: null, now: describeHolder(holder) };
    await trx
      .insertInto('task_input')
      .values({ task_instance_id: ask.taskInstanceId, ...values })
      .onConflict((conflict) => conflict.column('task_instance_id').doUpdateSet(values))
      .execute();
    return { asked: { taskInstanceId: ask.taskInstanceId, tryNumber: ask.held.tryNumber, nonce, timeoutAt } };
  });
}
