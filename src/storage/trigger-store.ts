import { recordWatchEvents, type WatchBatch, type WatchBatchResult } from './record-watch-events.ts';
import type { TaskEndState } from '../authoring/triggers/trigger-event.ts';
import { claimTriggers, type ClaimResult, type TriggerRow } from './claim-triggers.ts';
import type { FailureKwargs, StorageContext } from './context.ts';
import { deleteUnusedTriggers, sweepUnusedTriggers } from './delete-unused-triggers.ts';
import { failTimedOutDeferrals, nextDeferralDeadline } from './fail-timed-out-deferrals.ts';
import { failStrandedDeferrals } from './fail-stranded-deferrals.ts';
import { moveDeferredTaskInstances, prepareMove, type MoveResult, type PreparedMove } from './move-deferred-task-instances.ts';
import { existingTriggerIds, listOwnedTriggerIds, loadOwnedTriggers, releaseOwnedTriggers } from './owned-triggers.ts';
import { readTriggerOwnership, releaseTriggersOfOwners, type TriggerOwnership } from './trigger-owners.ts';
import { listTriggers, ownedTriggerCounts, type TriggerListing } from './list-triggers.ts';
import { countTriggers } from './count-waiting-work.ts';
import { listQuarantinedTriggers, type QuarantinedTrigger } from './quarantine-triggers.ts';
import { signalTriggerWaits, type SignalTriggerWait } from './signal-audience.ts';
import { listTaskInstancesWaitingOn, type WaitingTaskInstance } from './task-instances-waiting-on.ts';

/**
 * What a trigger produced, on its one way from the runner through the outcome writer into this
 * store: its event, or why it failed.
 */
export type TriggerOutcome = TriggerEventOutcome | TriggerFailureOutcome;

/** A trigger's event: its task instances resume with it (or end, for a TaskEndEvent). */
export interface TriggerEventOutcome {
  readonly kind: 'event';
  readonly triggerId: number;
  /** The event payload as JSON text. */
  readonly payloadJson: string;
  /** Set when the event ends its task instances (TaskEndEvent) instead of resuming them. */
  readonly endState: TaskEndState | null;
  /** When it was yielded (performance.now()), for the fire-to-commit latency. */
  readonly firedAt: number;
}

/** A trigger's failure: its task instances resume at the failure marker with it. */
export interface TriggerFailureOutcome {
  readonly kind: 'failure';
  readonly triggerId: number;
  readonly failure: FailureKwargs;
}

/*
 * A trigger row's life, every move there is (one row per distinct wait: identical waits with a
 * hash share it; the task instances waiting on it point at it with trigger_id):
 *
 *   (none) ──a deferral (worker, API, scheduler's start from a trigger): insert, or join an
 *            identical unfired row with the same hash──▶ created: unowned (triggerer_id null)
 *   created ──a live triggerer claims it, highest priority_weight then oldest, up to its
 *            capacity (claimTriggers, SKIP LOCKED on PostgreSQL)──▶ claimed: owned by its job
 *   claimed ──the owner loads it (loadOwnedTriggers) and starts its generator──▶ running
 *            (in memory only: the row says owned; the owner's heartbeat says alive)
 *   running ──it yields an event: its task instances move in one batch
 *            (prepareOutcomes, moveDeferredTaskInstances), then the row is deleted
 *            (deleteUnusedTriggers with its id)──▶ fired → deleted
 *   running ──it throws, ends without an event, or its kwargs fail its constructor: its task
 *            instances move to the failure marker (prepareOutcomes, moveDeferredTaskInstances)
 *            ──▶ failed → deleted
 *   claimed | running ──its owner stops (releaseOwnedTriggers, waking the peers), or a peer's
 *            pass finds the owner dead (its liveness lock free, its heartbeat older than the
 *            threshold, its job ended, or no job row at all: readTriggerOwnership, then
 *            releaseTriggersOfOwners, waking the peers)──▶ released: unowned again
 *   running ──its step held the loop past the watchdog's limit: the watchdog counts it and
 *            the process restarts (culprit_count + 1, unowned)──▶ released; at the
 *            quarantine limit ──▶ quarantined (quarantined_at set: never claimed again,
 *            listQuarantinedTriggers shows it)
 *   any ──no task instance points at it any more (fired, cleared, timed out: failTimedOutDeferrals
 *            moves those past their deadline)──▶ deleted by the periodic sweep
 *            (deleteUnusedTriggers without ids) or skipped as an orphan by a claim
 *
 * A composite wait (anyOf, allOf) is a row like any other (its triggerer holds it by id, with no
 * generator: it fires only through its members); its leaf
 * members are rows like any other, linked in trigger_member, and a member that has not fired
 * into its composite counts as waited on (claims, deleteUnusedTriggers). A member's firing
 * records its outcome there and, in the same batch, moves the task instances of each composite
 * it completes (resolveComposites in move-deferred-task-instances.ts): the composite is then
 * fired → deleted, and with it its member list and the members nothing else waits on.
 *
 * Every move is one conditional statement on the state it leaves (an owner moves only rows it
 * owns), so two triggerers never both run a trigger for long: one that lost a row stops it at
 * its next reconcile (the digest of readTriggerOwnership, listOwnedTriggerIds).
 */

/** Trigger rows: readTriggerOwnership, releaseTriggersOfOwners, claimTriggers, listQuarantinedTriggers, listOwnedTriggerIds, existingTriggerIds, loadOwnedTriggers, releaseOwnedTriggers, prepareOutcomes, moveDeferredTaskInstances, deleteUnusedTriggers, sweepUnusedTriggers, failTimedOutDeferrals, failStrandedDeferrals, nextDeferralDeadline, listTriggers, ownedTriggerCounts, countTriggers, signalTriggerWaits, recordWatchEvents, listTaskInstancesWaitingOn. */
export class TriggerStore {
  readonly #context: StorageContext;

  constructor(context: StorageContext) {
    this.#context = context;
  }

  readTriggerOwnership(jobId: number): Promise<TriggerOwnership> {
    return readTriggerOwnership(this.#context, jobId);
  }

  releaseTriggersOfOwners(ownerIds: readonly number[]): Promise<number> {
    return releaseTriggersOfOwners(this.#context, ownerIds);
  }

  claimTriggers(jobId: number, limit: number, options: Parameters<typeof claimTriggers>[3] = {}): Promise<ClaimResult> {
    return claimTriggers(this.#context, jobId, limit, options);
  }

  listQuarantinedTriggers(limit: number): Promise<QuarantinedTrigger[]> {
    return listQuarantinedTriggers(this.#context, limit);
  }

  listOwnedTriggerIds(jobId: number, page?: { readonly afterId: number; readonly limit: number }): Promise<number[]> {
    return listOwnedTriggerIds(this.#context, jobId, page);
  }

  existingTriggerIds(ids: readonly number[]): Promise<number[]> {
    return existingTriggerIds(this.#context, ids);
  }

  loadOwnedTriggers(jobId: number, ids: readonly number[]): Promise<TriggerRow[]> {
    return loadOwnedTriggers(this.#context, jobId, ids);
  }

  releaseOwnedTriggers(jobId: number): Promise<number> {
    return releaseOwnedTriggers(this.#context, jobId);
  }

  /**
   * A batch of outcomes, all events or all failures, made ready to move: their values sealed now,
   * a large batch on another thread, so the batch after the one being written is ready when that
   * write ends.
   */
  prepareOutcomes(outcomes: readonly TriggerEventOutcome[] | readonly TriggerFailureOutcome[]): PreparedMove {
    const rows = (outcomes as readonly TriggerOutcome[]).map((outcome) =>
      outcome.kind === 'event'
        ? { triggerId: outcome.triggerId, json: outcome.payloadJson, endState: outcome.endState }
        : { triggerId: outcome.triggerId, json: JSON.stringify(outcome.failure) },
    );
    return prepareMove(this.#context, rows, outcomes[0]?.kind ?? 'event');
  }

  /** Moves the task instances of prepared events or failures (see move-deferred-task-instances.ts). */
  moveDeferredTaskInstances(prepared: PreparedMove, now = Date.now()): Promise<MoveResult> {
    return moveDeferredTaskInstances(this.#context, prepared, now);
  }

  /** Deletes the given triggers (or, without ids, any) that no task instance points at. */
  deleteUnusedTriggers(triggerIds?: readonly number[]): Promise<number> {
    return deleteUnusedTriggers(this.#context, triggerIds);
  }

  sweepUnusedTriggers(afterId: number, limit: number): Promise<{ deleted: number; lastId: number | null }> {
    return sweepUnusedTriggers(this.#context, afterId, limit);
  }

  recordWatchEvents(batch: WatchBatch, ownerJobId: number, now = Date.now()): Promise<WatchBatchResult> {
    return recordWatchEvents(this.#context, batch, ownerJobId, now);
  }

  failTimedOutDeferrals(now = Date.now()): Promise<number> {
    return failTimedOutDeferrals(this.#context, now);
  }

  failStrandedDeferrals(now = Date.now()): Promise<number> {
    return failStrandedDeferrals(this.#context, now);
  }

  nextDeferralDeadline(): Promise<number | null> {
    return nextDeferralDeadline(this.#context);
  }

  listTriggers(filter: {
    readonly limit: number;
    readonly triggererId?: number;
    readonly perTrigger: number;
    readonly afterId?: number;
  }): Promise<TriggerListing[]> {
    return listTriggers(this.#context, filter);
  }

  ownedTriggerCounts(triggererIds: readonly number[]): Promise<Map<number, number>> {
    return ownedTriggerCounts(this.#context, triggererIds);
  }

  countTriggers(): Promise<number> {
    return countTriggers(this.#context);
  }

  /** The trigger rows of `classpath` (the signal trigger's) with their deferred task instances, kwargs opened. */
  signalTriggerWaits(classpath: string): Promise<SignalTriggerWait[]> {
    return signalTriggerWaits(this.#context, classpath);
  }

  /** The task instances deferred on these triggers now, named as their traces are. */
  listTaskInstancesWaitingOn(triggerIds: readonly number[]): Promise<WaitingTaskInstance[]> {
    return listTaskInstancesWaitingOn(this.#context, triggerIds);
  }
}
