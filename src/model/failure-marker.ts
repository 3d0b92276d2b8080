import type { DeferflowErrorCode } from '../vocabulary/errors.ts';

/**
 * next_method of a task instance whose trigger failed or timed out (Airflow's "__fail__"): the
 * triggerer writes it, the operator's resumeExecution() turns it back into the error.
 */
export const TRIGGER_FAILURE_METHOD = '__fail__';

/** Why: the trigger failed, the deferral timed out, or a question to a person timed out with no defaults. */
export type FailureReason = 'trigger_failure' | 'timeout' | 'input_timeout';

/** next_kwargs that the failure marker carries. */
export interface FailureKwargs {
  /** The stable code of what went wrong (DF_TRIGGER_FAILED, DF_UNKNOWN_TRIGGER, …): what scripts match on. */
  readonly code: DeferflowErrorCode;
  /** The error's text (the trigger's own, masked of its secrets). */
  readonly error: string;
  /** The trigger's stack, its own frames only; null when there is none. */
  readonly traceback: string | null;
  /** Whether the trigger failed, the deferral timed out, or a question timed out. */
  readonly reason: FailureReason;
}
