import type { StopRequest, TaskInstanceState } from '../database/schema.ts';
import type { Signal } from './signal.ts';

/** A signal an action acted on; `value` and `sentAt` are null once retention pruned it. */
export type ActedSignal = Omit<Signal, 'sentAt' | 'value'> & { readonly value: Signal['value'] | null; readonly sentAt: number | null };

/*
 * Signal actions (AIP-35): a task may declare signals that start, restart or stop it. Each task
 * instance remembers, per key, the version its action last took into account (at first the key's
 * latest when the DAG run was created); a newer version is acted on once, whichever scheduler
 * sees it first. Versions that arrive together are acted on together, as one (a restart runs the
 * task once more, not once per version), and none is acted on twice.
 *
 * What the scheduler does with a new version, by action and the task instance's state:
 *
 *   state                        start (sufficient)      start (necessary)        restart                          stop (end state E)
 *   (no state)                   run it now              run it once its upstreams  run it now                     E
 *                                                        let it (rule met)
 *   scheduled, queued            -                       -                        next start is a fresh try         E
 *   running                      -                       -                        stop the try, then a fresh try   stop the try, then E
 *   deferred                     -                       -                        fresh try (trigger dropped)      E (trigger dropped)
 *   awaiting_input               -                       -                        fresh try (question dropped)     E (its links refused)
 *   up_for_retry, up_for_rescheduled -                   -                        fresh try now                    E
 *   success, failed, skipped,    -                       -                        fresh try                        -
 *   upstream_failed
 *
 * "-": the version is taken into account and nothing changes. "run it" goes through the
 * scheduler's usual path (a task with a start trigger is deferred on it). A task with a start
 * trigger never runs its first method on a worker, so its "fresh try" is that path too: back to
 * no state with the version still to act on, which then runs it now, from its trigger. A running try is
 * stopped by its worker: the scheduler sets the task instance's stop_request, the worker aborts
 * the try's AbortSignal, drops whatever the try returns and carries the request out; a dead
 * worker's request is carried out by the scheduler's zombie reaping. A dropped trigger is killed
 * by its triggerer (onKill, then cleanup) once nothing else waits on it. Actions apply to the task
 * instances of unfinished DAG runs only: a finished run is history.
 */

export const SIGNAL_ACTIONS = ['start', 'restart', 'stop'] as const;
export type SignalActionName = (typeof SIGNAL_ACTIONS)[number];
export const START_CONDITIONS = ['sufficient', 'necessary'] as const;
/** Whether a start signal alone starts the task (sufficient), or only once its trigger rule is met too (necessary). */
export type StartCondition = (typeof START_CONDITIONS)[number];
export const STOP_END_STATES = ['skipped', 'failed', 'success'] as const;
/** The state a stop signal ends a task instance in. */
export type StopEndState = (typeof STOP_END_STATES)[number];

/** One signal a task reacts to, as the scheduler reads it from the serialized DAG. */
export type SignalAction =
  | { readonly key: string; readonly action: 'start'; readonly condition: StartCondition }
  | { readonly key: string; readonly action: 'restart' }
  | { readonly key: string; readonly action: 'stop'; readonly endState: StopEndState };

/** What acting on a new version does to a task instance (see the table above). */
export type SignalActionPlan =
  /** Nothing changes; the version is taken into account. */
  | { readonly kind: 'consume' }
  /** Left to the scheduler's trigger-rule decisions, which start the task (a start action on a task with no state yet). */
  | { readonly kind: 'decide' }
  /** To scheduled, afresh: no resume point, no trigger, no wait; the next start is a new try. */
  | { readonly kind: 'fresh-try' }
  /**
   * A task that starts from a trigger, to no state afresh (its wait dropped), the version left
   * pending: the next look finds it with no state and starts it as `decide` does, from its trigger.
   */
  | { readonly kind: 'restart-from-trigger' }
  /** To the end state, whatever the task was waiting on dropped. */
  | { readonly kind: 'end'; readonly state: StopEndState }
  /** A running try: its worker is asked to stop it and then carry the request out. */
  | { readonly kind: 'request'; readonly request: StopRequest };

const FINISHED: readonly (TaskInstanceState | null)[] = ['success', 'failed', 'skipped', 'upstream_failed'];
const WAITING: readonly (TaskInstanceState | null)[] = ['deferred', 'awaiting_input', 'up_for_retry', 'up_for_reschedule'];

/** The table above, for one action and state; `startsFromTrigger`: the task has a start trigger. */
export function planSignalAction(action: SignalAction, state: TaskInstanceState | null, startsFromTrigger = false): SignalActionPlan {
  switch (action.action) {
    case 'start':
      return state === null ? { kind: 'decide' } : { kind: 'consume' };
    case 'restart':
      if (state === null) return { kind: 'decide' };
      if (state === 'running') return { kind: 'request', request: 'restart' };
      if (state === 'scheduled' || state === 'queued' || WAITING.includes(state) || FINISHED.includes(state))
        return startsFromTrigger ? { kind: 'restart-from-trigger' } : { kind: 'fresh-try' };
      return { kind: 'consume' };
    case 'stop':
      if (state === 'running') return { kind: 'request', request: action.endState };
      if (FINISHED.includes(state)) return { kind: 'consume' };
      return { kind: 'end', state: action.endState };
  }
}

/**
 * Whether a task instance with no state yet runs now, given its trigger-rule decision and which
 * of its start and restart keys have a version it has not taken into account: `sufficient` (and
 * restart) run it whatever its upstreams; `necessary` holds it until its signal came. A rule
 * that can no longer be met ends it as usual, unless a sufficient signal came first.
 */
export function startDecision<Decision extends string>(
  ruleDecision: Decision | 'schedule' | 'wait',
  actions: readonly SignalAction[],
  newVersionKeys: ReadonlySet<string>,
): Decision | 'schedule' | 'wait' {
  let necessaryMissing = false;
  for (const action of actions) {
    const arrived = newVersionKeys.has(action.key);
    if (action.action === 'restart' && arrived) return 'schedule';
    if (action.action !== 'start') continue;
    if (action.condition === 'sufficient' && arrived) return 'schedule';
    if (action.condition === 'necessary' && !arrived) necessaryMissing = true;
  }
  if (ruleDecision === 'schedule' && necessaryMissing) return 'wait';
  return ruleDecision;
}
