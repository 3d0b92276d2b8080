import { describe, expect, it } from 'vitest';
import { decide, type TriggerRule } from '../../../src/model/trigger-rules.ts';

describe('trigger rules', () => {
  // [rule, upstream states, decision]
  const cases: [TriggerRule, (string | null)[], string][] = [
    ['all_success', [], 'schedule'],
    ['all_success', ['success', 'success'], 'schedule'],
    ['all_success', ['success', 'running'], 'wait'],
    ['all_success', ['success', null], 'wait'],
    ['all_success', ['success', 'failed'], 'upstream_failed'],
    ['all_success', ['running', 'upstream_failed'], 'upstream_failed'],
    ['all_success', ['success', 'skipped'], 'skip'],
    ['all_success', ['deferred', 'success'], 'wait'],
    ['all_success', ['up_for_retry', 'success'], 'wait'],
    ['all_done', ['success', 'failed', 'skipped', 'upstream_failed'], 'schedule'],
    ['all_done', ['success', 'deferred'], 'wait'],
    ['one_success', ['success', 'running'], 'schedule'],
    ['one_success', ['failed', 'running'], 'wait'],
    ['one_success', ['failed', 'skipped'], 'upstream_failed'],
    ['one_success', ['skipped', 'skipped'], 'skip'],
    ['all_failed', ['failed', 'upstream_failed'], 'schedule'],
    ['all_failed', ['failed', 'success'], 'skip'],
    ['all_failed', ['failed', 'queued'], 'wait'],
    ['one_failed', ['failed', 'running'], 'schedule'],
    ['one_failed', ['success', 'skipped'], 'skip'],
    ['one_failed', ['success', 'running'], 'wait'],
    ['none_failed', ['success', 'skipped'], 'schedule'],
    ['none_failed', ['success', 'failed'], 'upstream_failed'],
    ['none_failed', ['success', 'scheduled'], 'wait'],
  ];
  it.each(cases)('%s with upstreams %j: %s', (rule, upstream, decision) => {
    expect(decide(rule, upstream as never)).toBe(decision);
  });
});
