// Human input: a release waits for a person's approval, then a person picks deploy or rollback.
// While each question waits, the task holds no worker slot and no trigger row. The question's
// signed link goes to a webhook (a chat channel's incoming webhook, say) named by
// RELEASE_APPROVAL_WEBHOOK; without one it is logged. Run it with
//   deferflow standalone --dags examples/dags --trigger-dag release_approval
// and answer from the link, the status page (Awaiting input), or
//   deferflow tasks respond --run <run id> --task approve --choose approve --by you
import { Duration } from 'luxon';
import { ApprovalOperator, BaseOperator, BranchChoiceOperator, Dag, type AwaitingInputNotice, type RuntimeContext } from 'deferflow';

/** Posts the question and its link to the webhook: what a person clicks to answer. */
async function postToWebhook(notice: AwaitingInputNotice): Promise<void> {
  const webhook = process.env.RELEASE_APPROVAL_WEBHOOK;
  if (!webhook) {
    console.log(`${notice.question.subject} answer at ${notice.link}`);
    return;
  }
  const reply = await fetch(webhook, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      text: `${notice.question.subject} (${notice.taskInstance.dagId}, run ${notice.taskInstance.runId})`,
      link: notice.link,
      expires_at: notice.expiresAt,
    }),
  });
  // A failed delivery is logged by deferflow; the question can still be answered elsewhere.
  if (!reply.ok) throw new Error(`the webhook answered ${reply.status}`);
}

/** Stands for the real work of each branch. */
class Step extends BaseOperator<RuntimeContext> {
  execute(context: RuntimeContext): string {
    context.log.info(`${this.taskId} done`);
    return this.taskId;
  }
}

const approve = new ApprovalOperator({
  taskId: 'approve',
  subject: 'Release 1.2 passed its checks. Ship it?',
  timeout: Duration.fromObject({ hours: 24 }),
  defaultOutcome: 'reject', // no answer in a day: not shipped
  onAwaitingInput: postToWebhook,
});
const choose = new BranchChoiceOperator({
  taskId: 'choose',
  subject: 'Release 1.2 is staged: deploy it, or roll the staging back?',
  branches: ['deploy', 'rollback'],
  onAwaitingInput: postToWebhook,
});
const deploy = new Step({ taskId: 'deploy' });
const rollback = new Step({ taskId: 'rollback' });
// Runs after whichever branch ran: the other one is skipped, which none_failed accepts.
const announce = new Step({ taskId: 'announce', triggerRule: 'none_failed' });

export const dag = new Dag({ dagId: 'release_approval', description: 'a release that waits for people' }).add(approve, choose, deploy, rollback, announce);
approve.before(choose);
choose.before([deploy, rollback]);
deploy.before(announce);
rollback.before(announce);
