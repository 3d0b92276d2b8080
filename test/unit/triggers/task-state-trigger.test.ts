import { Duration } from 'luxon';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import type { DagRunStates, DagRunStatesQuery } from '../../../src/index.ts';
import { TriggerRegistry } from '../../../src/internals.ts';
import { TriggerRunner } from '../../../src/daemons/triggerer/trigger-runner.ts';
import { ExternalTaskSensor, TaskStateTrigger } from '../../../triggers/index.ts';
import { judgeTaskStates, resolveTaskStateCheck } from '../../../triggers/task-state-trigger.ts';
import { waitFor } from '../../support/fixtures.ts';

const AT = '2026-03-01T10:00:00.000Z';
const run = (state: DagRunStates['state'], taskStates: DagRunStates['taskStates'] = {}): DagRunStates => ({
  dagId: 'up',
  logicalDate: AT,
  runId: 'r',
  state,
  taskStates,
});

describe('TaskStateTrigger', () => {
  it('serializes canonically (dates in UTC, lists sorted, defaults written) and back to an equal trigger', () => {
    const trigger = new TaskStateTrigger({ dagId: 'up', taskIds: ['b', 'a'], logicalDates: ['2026-03-01T11:00:00+01:00'], pollInterval: 5 });
    expect(trigger.serialize()).toEqual({
      classpath: 'deferflow.triggers.TaskStateTrigger',
      kwargs: {
        dagId: 'up',
        taskIds: ['a', 'b'],
        logicalDates: [AT],
        allowedStates: ['success'],
        failedStates: ['failed', 'upstream_failed'],
        skippedStates: [],
        pollInterval: 5,
      },
    });
    expect(new TaskStateTrigger(trigger.serialize().kwargs as never).serialize()).toEqual(trigger.serialize());
    // The same wait given another way is the same row.
    expect(new TaskStateTrigger({ dagId: 'up', taskIds: ['a', 'b'], logicalDates: [AT], pollInterval: 5 }).serialize()).toEqual(trigger.serialize());
  });

  it.each([
    [{ taskIds: ['a'], logicalDates: [AT] }, 'TaskStateTrigger: dagId undefined is not a DAG id'],
    [{ dagId: 'up', taskIds: [], logicalDates: [AT] }, 'taskIds [] is not a list of task ids'],
    [{ dagId: 'up', logicalDates: ['2026-03-01T10:00:00'] }, 'logicalDates holds "2026-03-01T10:00:00", which is not an ISO-8601 moment with an offset or Z'],
    [{ dagId: 'up', logicalDates: [] }, 'logicalDates [] is not a list of moments'],
    [{ dagId: 'up', logicalDates: [AT], allowedStates: ['done'] }, 'allowedStates ["done"] is not a list of DAG run states (queued, running, success, failed)'],
    [
      { dagId: 'up', taskIds: ['a'], logicalDates: [AT], allowedStates: ['success', 'failed'], failedStates: ['failed'] },
      'failedStates and allowedStates both hold failed',
    ],
    [{ dagId: 'up', logicalDates: [AT], pollInterval: 0 }, 'pollInterval number 0 is not a number of seconds above 0'],
    [{ dagId: 'up', logicalDates: [AT], externalDagId: 'x' }, 'unknown field "externalDagId"'],
  ])('refuses %j, naming the field', (kwargs, message) => {
    expect(() => new TaskStateTrigger(kwargs as never)).toThrow(message);
  });

  it('judges runs: waiting until every watched instance is allowed, failed at once on a failed state or a missing task, skipped on a skipped state', () => {
    const tasks = resolveTaskStateCheck({ dagId: 'up', taskIds: ['a', 'b'], logicalDates: [AT], skippedStates: ['skipped'] }, 'test');
    expect(judgeTaskStates(tasks, [null]).outcome).toBe('waiting');
    expect(judgeTaskStates(tasks, [run('running', { a: ['success'], b: ['running'] })]).outcome).toBe('waiting');
    expect(judgeTaskStates(tasks, [run('running', { a: ['success'], b: [null] })]).outcome).toBe('waiting');
    expect(judgeTaskStates(tasks, [run('success', { a: ['success'], b: ['success'] })])).toMatchObject({ outcome: 'success' });
    expect(judgeTaskStates(tasks, [run('running', { a: ['running'], b: ['upstream_failed'] })])).toEqual({
      outcome: 'failed',
      reason: `task up.b of the run at ${AT} is upstream_failed`,
      states: { [`${AT} a`]: 'running', [`${AT} b`]: 'upstream_failed' },
    });
    expect(judgeTaskStates(tasks, [run('running', { a: ['skipped'], b: ['running'] })])).toMatchObject({ outcome: 'skipped' });
    expect(judgeTaskStates(tasks, [run('running', { a: ['success'] })])).toMatchObject({ outcome: 'failed', reason: 'DAG run r of up has no task "b"' });
    // A mapped task: every instance counts.
    expect(judgeTaskStates(tasks, [run('running', { a: ['success', 'running'], b: ['success'] })]).outcome).toBe('waiting');
    const whole = resolveTaskStateCheck({ dagId: 'up', logicalDates: [AT, '2026-03-02T10:00:00Z'] }, 'test');
    expect(judgeTaskStates(whole, [run('success'), null]).outcome).toBe('waiting');
    expect(judgeTaskStates(whole, [run('success'), run('success')]).outcome).toBe('success');
    expect(judgeTaskStates(whole, [run('failed'), null])).toMatchObject({ outcome: 'failed', reason: `DAG run of up at ${AT} is failed` });
  });

  it('stops at once when cancelled while its read is in flight', async () => {
    const reads: DagRunStatesQuery[] = [];
    let stopped = false;
    class Watched extends TaskStateTrigger {
      override async *run() {
        try {
          yield* super.run();
        } finally {
          stopped = true;
        }
      }
    }
    const registry = new TriggerRegistry([Watched as never]);
    const runner = new TriggerRunner(
      registry,
      pino({ level: 'silent' }),
      { add: () => {} },
      // A database that never answers: only the cancel can end the read.
      {
        blockThresholdMs: 1000,
        dagRunStates: (query) => {
          reads.push(query);
          return new Promise(() => {});
        },
      },
    );
    runner.start();
    try {
      runner.startTrigger({ id: 1, classpath: 'Watched', kwargs: JSON.stringify({ dagId: 'up', logicalDates: [AT] }) });
      await waitFor(() => reads.length === 1, { what: 'the read' });
      expect(reads[0]).toEqual({ dagId: 'up', logicalDate: AT, taskIds: null });
      await runner.cancel(1);
      await waitFor(() => stopped, { what: 'the generator stopped', timeoutMs: 1000 });
    } finally {
      runner.close();
    }
  });
});

describe('ExternalTaskSensor options', () => {
  it('are refused where the sensor is made, as DF_INVALID_SENSOR naming the field', () => {
    const make = (options: Record<string, unknown>) => () => new ExternalTaskSensor({ taskId: 's', externalDagId: 'up', ...options } as never);
    expect(make({ externalDagId: '' })).toThrow(/^ExternalTaskSensor: dagId "" is not a DAG id/);
    expect(make({ externalTaskId: 'a', externalTaskIds: ['b'] })).toThrow('give externalTaskId or externalTaskIds, not both');
    expect(make({ logicalDateDelta: 3600, logicalDateFn: 'x' })).toThrow('give logicalDateDelta or logicalDateFn, not both');
    expect(make({ logicalDateFn: 'nowhere' })).toThrow(
      /logicalDateFn "nowhere" is not registered \(registered: .*\); call ExternalTaskSensor.registerLogicalDateFn\(name, fn\) before making the sensor/,
    );
    expect(make({ logicalDateDelta: { hours: 1 } })).toThrow('logicalDateDelta an object is not a luxon Duration or a number of seconds');
    expect(make({ allowedStates: ['finished'] })).toThrow('allowedStates ["finished"] is not a list of DAG run states');
    expect(make({})).not.toThrow();
    try {
      make({ externalTaskIds: ['a', 7] })();
    } catch (error) {
      expect((error as { code: string }).code).toBe('DF_INVALID_SENSOR');
    }
  });

  it('works out the logical dates it watches: the run’s own, a delta before it, or a registered function of it', () => {
    const context = { dagRun: { logicalDate: '2026-03-01T10:00:00.000Z' } } as never;
    expect(new ExternalTaskSensor({ taskId: 's', externalDagId: 'up' }).logicalDates(context)).toEqual([AT]);
    expect(new ExternalTaskSensor({ taskId: 's', externalDagId: 'up', logicalDateDelta: Duration.fromObject({ days: 1 }) }).logicalDates(context)).toEqual([
      '2026-02-28T10:00:00.000Z',
    ]);
    ExternalTaskSensor.registerLogicalDateFn('twoBefore', (date) => [
      date.minus({ hours: 2 }),
      new Date(date.toMillis() - 3_600_000),
      '2026-03-01T10:00:00+01:00',
    ]);
    expect(new ExternalTaskSensor({ taskId: 's', externalDagId: 'up', logicalDateFn: 'twoBefore' }).logicalDates(context)).toEqual([
      '2026-03-01T08:00:00.000Z',
      '2026-03-01T09:00:00.000Z',
      '2026-03-01T09:00:00.000Z',
    ]);
  });
});
