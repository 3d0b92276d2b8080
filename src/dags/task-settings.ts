import { InvalidDagError } from '../errors.ts';
import type { AnyOperator } from '../operators/base-operator.ts';
import { TRIGGER_RULES, type TriggerRule } from '../model/trigger-rules.ts';
import { durationToMs } from '../time/duration.ts';
import type { RetryPolicy } from '../model/retry-policy.ts';
import type { Dag } from './dag.ts';

/** A task's settings with its DAG's default args and the built-in defaults filled in, in ms. */
export interface TaskSettings {
  readonly retry: RetryPolicy;
  readonly executionTimeoutMs: number | null;
  readonly priorityWeight: number;
  readonly triggerRule: TriggerRule;
}

/** The task's own option, else the DAG's default arg, else the built-in default; checked. */
export function taskSettings(dag: Dag, task: AnyOperator): TaskSettings {
  const own = task.taskOptions;
  const defaults = dag.options.defaultArgs ?? {};
  const pick = <K extends keyof typeof defaults>(key: K) => (own[key] !== undefined ? own[key] : defaults[key]);
  const where = `DAG ${dag.dagId}, task ${task.taskId}`;
  const retries = pick('retries') ?? 0;
  if (!Number.isInteger(retries) || retries < 0) throw new InvalidDagError(`${where}: retries must be a whole number >= 0, got ${JSON.stringify(retries)}`);
  const priorityWeight = pick('priorityWeight') ?? 1;
  if (!Number.isInteger(priorityWeight)) throw new InvalidDagError(`${where}: priorityWeight must be a whole number, got ${JSON.stringify(priorityWeight)}`);
  const triggerRule = pick('triggerRule') ?? 'all_success';
  if (!TRIGGER_RULES.includes(triggerRule))
    throw new InvalidDagError(`${where}: triggerRule must be one of ${TRIGGER_RULES.join(', ')}, got ${JSON.stringify(triggerRule)}`);
  const maxRetryDelay = pick('maxRetryDelay');
  const executionTimeout = pick('executionTimeout');
  try {
    return {
      retry: {
        retries,
        retryDelayMs: durationToMs(pick('retryDelay') ?? 300, 'retryDelay'),
        exponentialBackoff: pick('retryExponentialBackoff') ?? false,
        maxRetryDelayMs: maxRetryDelay === undefined || maxRetryDelay === null ? null : durationToMs(maxRetryDelay, 'maxRetryDelay'),
      },
      executionTimeoutMs: executionTimeout === undefined || executionTimeout === null ? null : durationToMs(executionTimeout, 'executionTimeout'),
      priorityWeight,
      triggerRule,
    };
  } catch (error) {
    throw new InvalidDagError(`${where}: ${(error as Error).message}`);
  }
}
