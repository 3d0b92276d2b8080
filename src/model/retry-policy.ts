/** How a task's failed tries are retried (the DAG's default args, or the task's own). */
export interface RetryPolicy {
  /** Retries after the first try: a task gets retries + 1 tries in all. */
  readonly retries: number;
  /** Wait before the first retry, in ms. */
  readonly retryDelayMs: number;
  /** Double the wait after each further failure. */
  readonly exponentialBackoff: boolean;
  /** The longest wait between tries, in ms (with backoff); null for no cap. */
  readonly maxRetryDelayMs: number | null;
}

export const NO_RETRIES: RetryPolicy = Object.freeze({ retries: 0, retryDelayMs: 300_000, exponentialBackoff: false, maxRetryDelayMs: null });

/** The wait before the try after `failedTry` (1 for the first): delay, or delay x 2^(failedTry-1), capped. */
export function retryDelayMs(policy: RetryPolicy, failedTry: number): number {
  const delay = policy.exponentialBackoff ? policy.retryDelayMs * 2 ** Math.max(0, failedTry - 1) : policy.retryDelayMs;
  return policy.maxRetryDelayMs === null ? delay : Math.min(delay, policy.maxRetryDelayMs);
}
