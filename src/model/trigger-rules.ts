import type { TaskInstanceState } from '../database/schema.ts';

/** When a task may run, given its upstream tasks' states (Airflow's trigger rules). */
export const TRIGGER_RULES = ['all_success', 'all_failed', 'all_done', 'one_success', 'one_failed', 'none_failed'] as const;
export type TriggerRule = (typeof TRIGGER_RULES)[number];

/** What the scheduler does with a task instance that has no state yet. */
export type RuleDecision = 'schedule' | 'wait' | 'skip' | 'upstream_failed';

/** States a task instance ends in: it will not change again on its own. */
export const FINISHED_STATES: readonly TaskInstanceState[] = ['success', 'failed', 'skipped', 'upstream_failed'];

/**
 * The decision for a task with `rule` whose upstreams are in `upstream` (null: no state yet).
 * A task with no upstreams is scheduled. A rule that can no longer be met ends the task:
 * upstream_failed where an upstream failed, skipped otherwise (as Airflow does).
 */
export function decide(rule: TriggerRule, upstream: readonly (TaskInstanceState | null)[]): RuleDecision {
  if (upstream.length === 0) return 'schedule';
  let success = 0;
  let failed = 0;
  let skipped = 0;
  for (const state of upstream) {
    if (state === 'success') success++;
    else if (state === 'failed' || state === 'upstream_failed') failed++;
    else if (state === 'skipped') skipped++;
  }
  const done = success + failed + skipped === upstream.length;
  switch (rule) {
    case 'all_success':
      if (failed > 0) return 'upstream_failed';
      if (skipped > 0) return 'skip';
      return done ? 'schedule' : 'wait';
    case 'all_failed':
      if (success > 0 || skipped > 0) return 'skip';
      return done ? 'schedule' : 'wait';
    case 'all_done':
      return done ? 'schedule' : 'wait';
    case 'one_success':
      if (success > 0) return 'schedule';
      if (!done) return 'wait';
      return failed > 0 ? 'upstream_failed' : 'skip';
    case 'one_failed':
      if (failed > 0) return 'schedule';
      return done ? 'skip' : 'wait';
    case 'none_failed':
      if (failed > 0) return 'upstream_failed';
      return done ? 'schedule' : 'wait';
  }
}
