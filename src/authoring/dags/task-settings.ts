import { InvalidDagError } from '../../vocabulary/errors.ts';
import type { AnyOperator } from '../operators/base-operator.ts';
import { TRIGGER_RULES, type TriggerRule } from '../../model/trigger-rules.ts';
import { durationToMs } from '../../vocabulary/time/duration.ts';
import type { RetryPolicy } from '../../model/retry-policy.ts';
import type { Dag } from './dag.ts';
import { SIGNAL_ACTIONS, START_CONDITIONS, STOP_END_STATES, type SignalAction } from '../../model/signal-actions.ts';
import { checkSignalKey } from '../../model/signal.ts';
import { checkQueue } from '../../model/queues.ts';

/** A task's settings with its DAG's default args and the built-in defaults filled in, in ms. */
export interface TaskSettings {
  readonly retry: RetryPolicy;
  readonly executionTimeoutMs: number | null;
  readonly priorityWeight: number;
  readonly triggerRule: TriggerRule;
  /** The signals that start, restart or stop it, checked; empty for none. */
  readonly signalActions: readonly SignalAction[];
  /** Its queue (`default` when it names none). */
  readonly queue: string;
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
      signalActions: signalActionsOf(task.taskOptions.signals, where),
      queue: checkQueue(pick('queue')),
    };
  } catch (error) {
    throw new InvalidDagError(`${where}: ${(error as Error).message}`);
  }
}

/** The task's `signals` option, checked: a list of { key, action, … }, one action per key. */
function signalActionsOf(signals: unknown, where: string): readonly SignalAction[] {
  if (signals === undefined || signals === null) return [];
  if (!Array.isArray(signals)) throw new InvalidDagError(`${where}: signals must be a list of { key, action }, got ${JSON.stringify(signals)}`);
  const seen = new Set<string>();
  return Object.freeze(
    signals.map((entry: unknown, index): SignalAction => {
      const at = `${where}: signals[${index}]`;
      if (typeof entry !== 'object' || entry === null) throw new InvalidDagError(`${at} must be { key, action }, got ${JSON.stringify(entry)}`);
      const { key, action, condition, endState, ...rest } = entry as Record<string, unknown>;
      let checkedKey: string;
      try {
        checkedKey = checkSignalKey(key);
      } catch (error) {
        throw new InvalidDagError(`${at}: ${(error as Error).message}`);
      }
      if (seen.has(checkedKey)) throw new InvalidDagError(`${at}: key ${checkedKey} has an action already; one action per key`);
      seen.add(checkedKey);
      const extra = Object.keys(rest);
      if (extra.length > 0)
        throw new InvalidDagError(
          `${at} has ${extra.map((name) => JSON.stringify(name)).join(', ')}; it takes key, action, condition (start) and endState (stop)`,
        );
      if (!(SIGNAL_ACTIONS as readonly unknown[]).includes(action))
        throw new InvalidDagError(`${at}: action must be one of ${SIGNAL_ACTIONS.join(', ')}, got ${JSON.stringify(action)}`);
      if (condition !== undefined && action !== 'start') throw new InvalidDagError(`${at}: condition is for start actions only`);
      if (endState !== undefined && action !== 'stop') throw new InvalidDagError(`${at}: endState is for stop actions only`);
      if (action === 'start') {
        const chosen = condition ?? 'sufficient';
        if (!(START_CONDITIONS as readonly unknown[]).includes(chosen))
          throw new InvalidDagError(`${at}: condition must be one of ${START_CONDITIONS.join(', ')}, got ${JSON.stringify(condition)}`);
        return Object.freeze({ key: checkedKey, action, condition: chosen as (typeof START_CONDITIONS)[number] });
      }
      if (action === 'stop') {
        const chosen = endState ?? 'skipped';
        if (!(STOP_END_STATES as readonly unknown[]).includes(chosen))
          throw new InvalidDagError(`${at}: endState must be one of ${STOP_END_STATES.join(', ')}, got ${JSON.stringify(endState)}`);
        return Object.freeze({ key: checkedKey, action, endState: chosen as (typeof STOP_END_STATES)[number] });
      }
      return Object.freeze({ key: checkedKey, action: 'restart' as const });
    }),
  );
}
