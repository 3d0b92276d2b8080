import { describe, expect, it } from 'vitest';
import { Dag } from '../../../src/authoring/dags/dag.ts';
import { serializeDag, toSchedulerDag } from '../../../src/authoring/dags/serialized-dag.ts';
import { BaseOperator, chain, InvalidDagError, InvalidSerializedDagError, type TaskOptions } from '../../../src/index.ts';
import * as t from '../../fixtures/test-triggers.ts';

class Noop extends BaseOperator {
  constructor(options: TaskOptions) {
    super(options);
  }
  execute() {
    return null;
  }
}
const op = (taskId: string, more: Partial<TaskOptions> = {}) => new Noop({ taskId, ...more });

describe('DAGs', () => {
  it('an operator is no thenable: an async function returning one resolves to it', async () => {
    const made = async () => op('made');
    expect((await made()).taskId).toBe('made');
  });

  it('before() and chain() build the upstream sets; before() returns what it was given', () => {
    const [extract, clean, enrich, load, report] = ['extract', 'clean', 'enrich', 'load', 'report'].map((id) => op(id));
    const dag = new Dag({ dagId: 'etl' }).add(extract!, clean!, enrich!, load!, report!);
    expect(extract!.before([clean!, enrich!])).toEqual([clean, enrich]);
    chain([clean!, enrich!], load!);
    expect(load!.before(report!)).toBe(report);
    dag.validate();
    const upstream = (task: BaseOperator) => [...task.upstream].map((u) => u.taskId).sort();
    expect(upstream(clean!)).toEqual(['extract']);
    expect(upstream(load!)).toEqual(['clean', 'enrich']);
    expect(upstream(report!)).toEqual(['load']);
    expect(upstream(extract!)).toEqual([]);
  });

  it('refuses bad ids, duplicate task ids, a task in two DAGs, a foreign upstream and cycles, naming them', () => {
    expect(() => new Dag({ dagId: 'has space' })).toThrow(/DAG id "has space"/);
    expect(() => op('bad/id')).toThrow(InvalidDagError);
    expect(() => new Dag({ dagId: 'd' }).add(op('a'), op('a'))).toThrow('DAG d: two tasks have the id a');
    const shared = op('shared');
    new Dag({ dagId: 'first' }).add(shared);
    expect(() => new Dag({ dagId: 'second' }).add(shared)).toThrow('DAG second: task shared already belongs to DAG first');

    const outsider = op('outsider');
    const inside = op('inside');
    outsider.before(inside);
    expect(() => new Dag({ dagId: 'd' }).add(inside).validate()).toThrow('DAG d: task inside waits for outsider, which is not a task of this DAG');

    const [a, b, c] = [op('a'), op('b'), op('c')];
    a!.before(b!).before(c!).before(a!);
    expect(() => new Dag({ dagId: 'loop' }).add(a!, b!, c!).validate()).toThrow(/DAG loop has a cycle: a -> b -> c -> a$/);
  });

  it('serializes resolved settings, stably; the hash changes with the DAG; callables are stored by name', () => {
    const build = (retries: number) => {
      const dag = new Dag({
        dagId: 'etl',
        defaultArgs: { retries: 2, retryDelay: 60, priorityWeight: 5 },
        params: { rows: 10, fmt: function toCsv() {} } as never,
      });
      const extract = op('extract', { retries, executionTimeout: 90 });
      const wait = op('wait', { startTrigger: { trigger: new t.DelayTrigger({ ms: 5 }), method: 'done', kwargs: { why: 'x' }, timeout: 30 } });
      const load = op('load', { triggerRule: 'all_done' });
      dag.add(load, wait, extract);
      extract.before(wait).before(load);
      return serializeDag(dag, '/dags/etl.ts');
    };
    const first = build(2);
    expect(build(2)).toEqual(first);
    expect(build(3).hash).not.toBe(first.hash);
    const dag = (first.data as any).dag;
    expect(dag.params).toEqual({ rows: 10, fmt: { __callable: 'toCsv' } });
    expect(dag.tasks.map((task: any) => task.task_id)).toEqual(['extract', 'load', 'wait']);
    expect(dag.tasks[0]).toMatchObject({
      operator: 'Noop',
      retries: 2,
      retry_delay_ms: 60_000,
      execution_timeout_ms: 90_000,
      priority_weight: 5,
      upstream_task_ids: [],
    });
    expect(dag.tasks[1]).toMatchObject({ trigger_rule: 'all_done', upstream_task_ids: ['wait'], execution_timeout_ms: null });
    expect(dag.tasks[2].start_trigger).toEqual({
      classpath: 'test.DelayTrigger',
      kwargs: { ms: 5 },
      method: 'done',
      next_kwargs: { why: 'x' },
      timeout_ms: 30_000,
    });

    const forScheduler = toSchedulerDag('etl', JSON.stringify(first.data), first.hash);
    expect(forScheduler.tasks.find((task) => task.taskId === 'load')).toEqual({
      taskId: 'load',
      operator: 'Noop',
      upstreamTaskIds: ['wait'],
      triggerRule: 'all_done',
      priorityWeight: 5,
      startTrigger: null,
      retry: { retries: 2, retryDelayMs: 60_000, exponentialBackoff: false, maxRetryDelayMs: null },
      signalActions: [],
      queue: 'default',
    });
    expect(forScheduler.tasks.find((task) => task.taskId === 'wait')!.startTrigger).toEqual({
      classpath: 'test.DelayTrigger',
      kwargs: { ms: 5 },
      method: 'done',
      nextKwargs: { why: 'x' },
      timeoutMs: 30_000,
    });
  });

  it("stores a task's queue (its own, else the DAG's default), absent for default so other DAGs keep their hash; refuses a bad name", () => {
    const build = (defaultArgs: Record<string, unknown>, own: Record<string, unknown>) =>
      serializeDag(new Dag({ dagId: 'q', defaultArgs }).add(op('a', own), op('b')), '/q.ts');
    const none = build({}, {});
    expect(build({ queue: 'default' }, {}).hash).toBe(none.hash);
    const routed = build({ queue: 'gpu' }, { queue: 'io' });
    expect((routed.data as any).dag.tasks.map((task: any) => task.queue)).toEqual(['io', 'gpu']);
    expect((none.data as any).dag.tasks.map((task: any) => 'queue' in task)).toEqual([false, false]);
    expect(toSchedulerDag('q', JSON.stringify(routed.data), routed.hash).tasks.map((task) => task.queue)).toEqual(['io', 'gpu']);
    expect(() => build({}, { queue: 'g p u' })).toThrow(/DAG q, task a: queue must be a name of letters, digits/);
    const tampered = JSON.parse(JSON.stringify(routed.data));
    tampered.dag.tasks[0].queue = 'no way';
    expect(() => toSchedulerDag('q', JSON.stringify(tampered), routed.hash)).toThrow(/tasks\[0\]\.queue/);
  });

  it('stores a watch schedule (its triggers serialized, its queue), read back for the processing; refuses what a watch schedule cannot be', () => {
    const watcher = new t.DelayTrigger({ ms: 5 });
    const dag = new Dag({ dagId: 'w', schedule: { watch: [watcher], queue: 'io' } }).add(op('a'));
    const { data, hash } = serializeDag(dag, '/w.ts');
    expect((data as any).dag.schedule).toEqual({ watch: [{ classpath: 'test.DelayTrigger', kwargs: { ms: 5 } }], queue: 'io' });
    expect(toSchedulerDag('w', JSON.stringify(data), hash).watchSchedule).toEqual({
      watchers: [{ classpath: 'test.DelayTrigger', kwargs: { ms: 5 } }],
      queue: 'io',
    });
    expect(toSchedulerDag('w', JSON.stringify(data), hash).schedule).toBeNull();
    expect(() => new Dag({ dagId: 'w', schedule: { watch: [] } })).toThrow(/DAG w: schedule.watch names no trigger/);
    expect(() => new Dag({ dagId: 'w', schedule: { watch: [{} as never] } })).toThrow(/schedule.watch\[0\] is not a trigger/);
    expect(() => new Dag({ dagId: 'w', schedule: { watch: watcher }, startDate: new Date() })).toThrow(/startDate has no meaning with a watch schedule/);
    expect(() => new Dag({ dagId: 'w', schedule: { watch: watcher, queue: 'a b' } })).toThrow(/schedule.queue must be a name/);
  });

  it('refuses a non-JSON param, naming DAG, task and field', () => {
    const dag = new Dag({ dagId: 'd' }).add(op('t', { params: { when: new Date() } as never }));
    expect(() => serializeDag(dag, '/x.ts')).toThrow(/DAG d, task t: params\.when: a Date/);
  });

  it('reading a stored DAG refuses another version or a broken field, naming it', () => {
    const dag = new Dag({ dagId: 'd' }).add(op('a'), op('b'));
    dag.task('a')!.before(dag.task('b')!);
    const { data, hash } = serializeDag(dag, '/x.ts');
    const tampered = (change: (d: any) => void) => {
      const copy = JSON.parse(JSON.stringify(data));
      change(copy);
      return () => toSchedulerDag('d', JSON.stringify(copy), hash);
    };
    expect(tampered((d) => (d.__version = 2))).toThrow(InvalidSerializedDagError);
    expect(tampered((d) => (d.__version = 2))).toThrow('serialized DAG "d": __version is 2; this deferflow reads version 1');
    expect(tampered((d) => (d.dag.tasks[1].upstream_task_ids = ['ghost']))).toThrow('dag.tasks[1].upstream_task_ids names a task the DAG does not have');
    expect(tampered((d) => (d.dag.tasks[0].trigger_rule = 'sometimes'))).toThrow('dag.tasks[0].trigger_rule is not one of');
    expect(tampered((d) => (d.dag.tasks[0].retries = -1))).toThrow('dag.tasks[0].retries is not a whole number >= 0');
  });
});
