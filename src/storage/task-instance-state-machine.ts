import { TASK_INSTANCE_STATES, type TaskInstanceState } from '../database/schema.ts';

/*
 * A task instance's life (Airflow's states), every transition there is:
 *
 *   (new row) ──scheduler: a DAG run is created / createTaskInstance──▶ (no state) | any state
 *   (no state) ──scheduler: trigger rule met──▶ scheduled
 *   (no state) ──scheduler: rule can no longer be met──▶ skipped | upstream_failed | failed
 *   (no state) ──scheduler: rule met, the task starts from a trigger──▶ deferred
 *   scheduled ──worker claims──▶ queued ──worker starts──▶ running
 *   scheduled | queued | running ──defer (worker: TaskDeferred; API: deferTaskInstance)──▶ deferred
 *   running ──worker: the try's outcome──▶ success | failed | skipped | up_for_retry | up_for_reschedule
 *   running ──worker: stopped before it finished (hand back, the try given back)──▶ scheduled
 *   deferred ──triggerer: event or trigger failure──▶ scheduled, resumed at next_method
 *   deferred ──triggerer: a TaskEndEvent──▶ success | failed | skipped
 *   deferred ──triggerer: trigger_timeout passed──▶ scheduled, resumed at __fail__
 *   deferred ──triggerer's reconciler: no trigger row and no timeout (stranded)──▶ scheduled, resumed at __fail__
 *   up_for_retry | up_for_reschedule ──scheduler: ready_at passed──▶ scheduled
 *   running ──worker: the try asked a person a question (awaitInput)──▶ awaiting_input
 *       (no slot, no trigger row), or ▶ scheduled when the response came while the try still ran
 *   awaiting_input ──a person's response (link, CLI, HTTP, API, status page)──▶ scheduled, resumed at next_method
 *   awaiting_input ──scheduler: its deadline (ready_at) passed──▶ scheduled, resumed with the
 *       question's defaults, or at __fail__ (DF_INPUT_TIMEOUT) when it has none
 *   (no state) ──worker: a branch chose other downstream tasks (BranchChoiceOperator)──▶ skipped
 *   queued ──scheduler: its worker's heartbeat went stale──▶ scheduled (it never started)
 *   running ──scheduler: its worker's heartbeat went stale──▶ up_for_retry | failed
 *   any ──a person: tasks clear (CLI, status page)──▶ (no state)
 *   any but running ──a person: mark success or failed (CLI, status page)──▶ success | failed
 *   running ──a person: mark success or failed──▶ running, stop_request set (its worker ends the try so)
 *   (no state) ──scheduler: a start or restart signal came──▶ scheduled
 *   a signal's restart (src/model/signal-actions.ts has the whole table):
 *     deferred | awaiting_input | up_for_retry | up_for_reschedule | success | failed | skipped | upstream_failed
 *       ──scheduler──▶ scheduled, afresh (a new try; the trigger dropped)
 *     scheduled | queued ──scheduler──▶ the same state, its resume point dropped (the start is a new try)
 *     any of these, of a task that starts from its trigger ──scheduler──▶ (no state), afresh, the
 *       signal still to act on: it starts from its trigger as a (no state) task does
 *   a signal's stop: (no state) | scheduled | queued | deferred | awaiting_input | up_for_retry | up_for_reschedule
 *       ──scheduler──▶ its end state (skipped, failed or success)
 *   running ──scheduler: a signal stops or restarts it──▶ running, stop_request set
 *   running (stop_request) ──its worker aborts the try | the scheduler, its worker dead──▶
 *       scheduled (restart) | skipped | failed | success
 *
 * Every transition is one conditional UPDATE on the state it leaves (and, for a worker, on the
 * try it holds: its job and the try's number, see held-try.ts), so two processes racing for one
 * task instance cannot both win: the loser's update matches no row, and a worker that lost a try
 * while it was paused writes nothing to the try that replaced it. Clearing alone is
 * unconditional: a person asked for it.
 *
 * TASK_INSTANCE_TRANSITIONS is the same, one row per statement kind, naming the file that
 * performs it. Each `updateTable('task_instance')` in src/storage carries a
 * `// transition: <name>` comment, and test/unit/task-instance-state-machine.test.ts checks that every
 * one is listed here, in that file, and that the states its SQL names are the row's.
 */

export interface TaskInstanceTransition {
  /** The states it leaves: `null` is "no state"; 'any' for every state; 'new' for an inserted row. */
  readonly from: readonly (TaskInstanceState | null)[] | 'any' | 'new';
  /** The states it may set (`null`: no state). */
  readonly to: readonly (TaskInstanceState | null)[];
  /** Who performs it. */
  readonly by: string;
  /** The storage operation's file, under src/storage/. */
  readonly file: string;
}

const ALL_STATES: readonly (TaskInstanceState | null)[] = [null, ...TASK_INSTANCE_STATES];

export const TASK_INSTANCE_TRANSITIONS = {
  'create-run': { from: 'new', to: [null], by: 'scheduler or CLI (a DAG run is created)', file: 'create-dag-run.ts' },
  'create-api': { from: 'new', to: ALL_STATES, by: 'user code (createTaskInstance)', file: 'create-task-instance.ts' },
  decide: { from: [null], to: ['scheduled', 'skipped', 'upstream_failed', 'failed'], by: 'scheduler (trigger rules)', file: 'dag-run-progress.ts' },
  claim: { from: ['scheduled'], to: ['queued'], by: 'worker', file: 'task-instance-transitions.ts' },
  start: { from: ['queued'], to: ['running'], by: 'worker', file: 'task-instance-transitions.ts' },
  finish: { from: ['running'], to: ['success', 'failed', 'skipped', 'up_for_retry', 'up_for_reschedule'], by: 'worker', file: 'task-instance-transitions.ts' },
  'hand-back': { from: ['running'], to: ['scheduled'], by: 'worker (stopping)', file: 'task-instance-transitions.ts' },
  defer: {
    from: ['scheduled', 'queued', 'running'],
    to: ['deferred'],
    by: 'worker or user code (deferTaskInstance)',
    file: 'defer-task-instance.ts',
  },
  // One step, so no worker can claim the task between the decision and the deferral.
  'start-from-trigger': { from: [null], to: ['deferred'], by: 'scheduler (a task that starts from its trigger)', file: 'defer-task-instance.ts' },
  resume: { from: ['deferred'], to: ['scheduled'], by: 'triggerer (event or trigger failure)', file: 'move-deferred-task-instances.ts' },
  'end-from-trigger': { from: ['deferred'], to: ['success', 'failed', 'skipped'], by: 'triggerer (TaskEndEvent)', file: 'move-deferred-task-instances.ts' },
  'time-out': { from: ['deferred'], to: ['scheduled'], by: 'triggerer (timeout sweep)', file: 'fail-timed-out-deferrals.ts' },
  'strand-repair': { from: ['deferred'], to: ['scheduled'], by: 'triggerer (the reconciler: no trigger row, no timeout)', file: 'fail-stranded-deferrals.ts' },
  'ready-again': { from: ['up_for_retry', 'up_for_reschedule'], to: ['scheduled'], by: 'scheduler', file: 'schedule-ready-task-instances.ts' },
  'await-input': { from: ['running'], to: ['awaiting_input'], by: 'worker (the try asked a question: awaitInput)', file: 'await-input.ts' },
  'await-input-answered': {
    from: ['running'],
    to: ['scheduled'],
    by: 'worker (the try asked a question whose response came while it still ran)',
    file: 'await-input.ts',
  },
  respond: {
    from: ['awaiting_input'],
    to: ['scheduled'],
    by: "a person's response (link, CLI, HTTP, API, status page) or the scheduler's defaults at the deadline",
    file: 'respond-to-input.ts',
  },
  'input-time-out': {
    from: ['awaiting_input'],
    to: ['scheduled'],
    by: 'scheduler (a question with no defaults past its deadline)',
    file: 'time-out-awaited-input.ts',
  },
  'branch-skip': { from: [null], to: ['skipped'], by: 'worker (a branch followed other downstream tasks)', file: 'task-instance-transitions.ts' },
  'reap-queued': { from: ['queued'], to: ['scheduled'], by: 'scheduler (dead worker)', file: 'reap-zombie-task-instances.ts' },
  'reap-running': { from: ['running'], to: ['up_for_retry', 'failed'], by: 'scheduler (dead worker)', file: 'reap-zombie-task-instances.ts' },
  clear: { from: 'any', to: [null], by: 'a person (tasks clear, the status page)', file: 'clear-task-instances.ts' },
  mark: {
    from: [null, 'scheduled', 'queued', 'deferred', 'awaiting_input', 'up_for_retry', 'up_for_reschedule', 'success', 'failed', 'skipped', 'upstream_failed'],
    to: ['success', 'failed'],
    by: 'a person (tasks mark, the status page)',
    file: 'mark-task-instances.ts',
  },
  'mark-running': { from: ['running'], to: [], by: 'a person (tasks mark of a running try; stop_request set)', file: 'mark-task-instances.ts' },
  'signal-restart': {
    from: ['deferred', 'awaiting_input', 'up_for_retry', 'up_for_reschedule', 'success', 'failed', 'skipped', 'upstream_failed'],
    to: ['scheduled'],
    by: 'scheduler (a restart signal)',
    file: 'signal-actions.ts',
  },
  'signal-restart-from-trigger': {
    from: ['scheduled', 'queued', 'deferred', 'awaiting_input', 'up_for_retry', 'up_for_reschedule', 'success', 'failed', 'skipped', 'upstream_failed'],
    to: [null],
    by: 'scheduler (a restart signal of a task that starts from its trigger; the start follows from no state)',
    file: 'signal-actions.ts',
  },
  'signal-start': { from: [null], to: ['scheduled'], by: 'scheduler (a start or restart signal, the version recorded with it)', file: 'signal-actions.ts' },
  'signal-fresh-start': { from: ['scheduled', 'queued'], to: [], by: 'scheduler (a restart signal before the start)', file: 'signal-actions.ts' },
  'signal-stop': {
    from: [null, 'scheduled', 'queued', 'deferred', 'awaiting_input', 'up_for_retry', 'up_for_reschedule'],
    to: ['success', 'failed', 'skipped'],
    by: 'scheduler (a stop signal)',
    file: 'signal-actions.ts',
  },
  'request-stop': { from: ['running'], to: [], by: 'scheduler (a stop or restart signal; stop_request set)', file: 'signal-actions.ts' },
  'stop-running': { from: ['running'], to: ['scheduled', 'success', 'failed', 'skipped'], by: 'worker (carries out a stop request)', file: 'stop-requests.ts' },
  'reap-stopped': {
    from: ['running'],
    to: ['scheduled', 'success', 'failed', 'skipped'],
    by: 'scheduler (a stop request of a dead worker)',
    file: 'reap-zombie-task-instances.ts',
  },
} as const satisfies Record<string, TaskInstanceTransition>;

export type TaskInstanceTransitionName = keyof typeof TASK_INSTANCE_TRANSITIONS;
