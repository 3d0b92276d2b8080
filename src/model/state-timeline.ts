import type { TaskInstanceState } from '../database/schema.ts';
import { FINISHED_STATES } from './trigger-rules.ts';

/** A span of time a task instance spent in one state. */
export interface StateSpan {
  readonly state: TaskInstanceState | null;
  readonly tryNumber: number;
  /** Epoch ms. */
  readonly from: number;
  readonly to: number;
  readonly triggerId: number | null;
}

/** States in which a task instance holds a worker slot: claimed (queued for its worker) and running. */
const HOLDING_A_SLOT = new Set<TaskInstanceState | null>(['queued', 'running']);
/** States in which it waits without one: what deferral (and its kin) saves. */
const WAITING = new Set<TaskInstanceState | null>(['deferred', 'up_for_reschedule', 'awaiting_input', 'up_for_retry']);

/**
 * One task instance's spans, from its state changes in order (see listStateChanges): each state
 * lasts until the next change; the last, unless finished, until `now`.
 */
export function stateSpans(
  changes: readonly { readonly state: TaskInstanceState | null; readonly tryNumber: number; readonly at: number; readonly triggerId: number | null }[],
  now: number,
): StateSpan[] {
  const spans: StateSpan[] = [];
  changes.forEach((change, i) => {
    const next = changes[i + 1];
    if (next === undefined && change.state !== null && FINISHED_STATES.includes(change.state)) return;
    spans.push({ state: change.state, tryNumber: change.tryNumber, from: change.at, to: Math.max(change.at, next?.at ?? now), triggerId: change.triggerId });
  });
  return spans;
}

/** Where a run's time went: worker slots held (queued, running) against waiting without one (deferred, up for reschedule or retry, awaiting input). */
export function slotTime(spans: readonly StateSpan[]): { readonly holdingMs: number; readonly waitingMs: number } {
  let holdingMs = 0;
  let waitingMs = 0;
  for (const span of spans) {
    if (HOLDING_A_SLOT.has(span.state)) holdingMs += span.to - span.from;
    else if (WAITING.has(span.state)) waitingMs += span.to - span.from;
  }
  return { holdingMs, waitingMs };
}
