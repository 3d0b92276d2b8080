import { ReturnValueTooLargeError } from '../../vocabulary/errors.ts';
import { callNextMethod } from '../../authoring/operators/base-operator.ts';
import { isBranchResult, isTaskAwaitingInput, isTaskFailedWithoutRetry, isTaskRescheduled, isTaskSkipped } from '../../authoring/operators/task-signals.ts';
import type { JsonObject } from '../../vocabulary/serialization/json.ts';
import { isTaskDeferred } from '../../authoring/operators/task-deferred.ts';
import { toJsonText } from '../../vocabulary/serialization/json.ts';
import type { RetryPolicy } from '../../model/retry-policy.ts';
import type { ClaimedTaskInstance, Deferral, StartedTaskInstance } from '../../storage/index.ts';
import type { TryLoggers } from './task-log-writer.ts';
import type { AnyOperator, TaskContext } from '../../authoring/operators/base-operator.ts';

/** What one run of a task's code came to, as the worker records it. */
export type TaskResult =
  /** execute() or the resumed method returned; its value as JSON text (null for undefined). */
  | { readonly kind: 'returned'; readonly returnValueJson: string | null; readonly followTaskIds?: readonly string[] }
  | { readonly kind: 'deferred'; readonly deferral: Deferral }
  | { readonly kind: 'skipped'; readonly reason: string }
  | { readonly kind: 'rescheduled'; readonly readyAt: number }
  /** It asked a person a question (awaitInput): it waits without a slot and resumes at `method`. */
  | { readonly kind: 'awaiting_input'; readonly method: string; readonly kwargs: JsonObject }
  /** It threw (or its runner died); `retryable` is false for a TaskFailedWithoutRetry. */
  | { readonly kind: 'failed'; readonly error: unknown; readonly retryable: boolean };

/** A claimed task instance's task, loaded and ready to run once the worker has started it. */
export interface PreparedTask {
  readonly retry: RetryPolicy;
  /** The whole task's time budget, deferrals included; null for none. */
  readonly executionTimeoutMs: number | null;
  /**
   * Runs execute(), or the method a deferral resumes at. Never rejects: whatever the code
   * does ends as a TaskResult. Aborting `signal` asks the code to stop; where it runs isolated
   * (a task runner process), the runner is also terminated if it has not stopped shortly after.
   */
  run(label: string, claimed: ClaimedTaskInstance, started: StartedTaskInstance, tryLog: TryLoggers, signal: AbortSignal): Promise<TaskResult>;
  /**
   * After an abort: resolves once the code has stopped, so what it logged on its way out is in
   * the try's log before the try is recorded. A runner process's run has ended or the process
   * was killed; code on the worker's own loop cannot be stopped, so it resolves at once.
   */
  stopped(): Promise<void>;
}

/**
 * Where a worker's task code runs: on the worker's own event loop (InlineTaskRunner) or in a
 * pool of child processes (ProcessTaskRunner), which the worker's claims, heartbeats and
 * outcome writes do not share.
 */
export interface TaskRunner {
  /** Loads the task of a claimed task instance; rejects, naming the task, when it cannot. */
  prepare(claimed: ClaimedTaskInstance): Promise<PreparedTask>;
  /** The worker is starting: runners that should be ready before the first task may start now (called again once it runs). */
  start?(): void;
  /** The worker stopped: end every runner (called again if it was already). */
  close(): Promise<void>;
}

/** The most JSON a task instance keeps as its return value (Airflow's XCom is for small values too). */
export const MAX_RETURN_VALUE_BYTES = 1024 * 1024;

/** Runs a task's code to its TaskResult, wherever it runs: what it returns, defers or throws. */
export async function runToResult<Context extends TaskContext>(
  label: string,
  operator: AnyOperator,
  context: () => Context | Promise<Context>,
  started: StartedTaskInstance,
): Promise<TaskResult> {
  try {
    const built = await context();
    const returned = await (started.nextMethod === null
      ? operator.execute(built)
      : callNextMethod(operator, built, started.nextMethod, started.nextKwargsJson));
    const branch = isBranchResult(returned) ? returned : null;
    const value = branch ? branch.value : returned;
    const returnValueJson = value === undefined ? null : toJsonText(value, "the task's return value");
    if (returnValueJson !== null && Buffer.byteLength(returnValueJson) > MAX_RETURN_VALUE_BYTES) {
      throw new ReturnValueTooLargeError(label, Buffer.byteLength(returnValueJson), MAX_RETURN_VALUE_BYTES);
    }
    return branch ? { kind: 'returned', returnValueJson, followTaskIds: [...branch.followTaskIds] } : { kind: 'returned', returnValueJson };
  } catch (thrown) {
    if (isTaskDeferred(thrown)) {
      const { serializedTrigger, triggerHash, method, kwargs, timeoutMs } = thrown;
      return { kind: 'deferred', deferral: { serializedTrigger, triggerHash, method, kwargs, timeoutMs } };
    }
    if (isTaskAwaitingInput(thrown)) return { kind: 'awaiting_input', method: thrown.method, kwargs: thrown.kwargs };
    if (isTaskSkipped(thrown)) return { kind: 'skipped', reason: thrown.reason };
    if (isTaskRescheduled(thrown)) return { kind: 'rescheduled', readyAt: thrown.readyAt };
    return { kind: 'failed', error: thrown, retryable: !isTaskFailedWithoutRetry(thrown) };
  }
}
