// Traces of an embedded deferflow with an in-memory exporter: a task that defers is one trace, its
// root the task instance and its children the try that deferred, the trigger's run on the
// triggerer and the resumed try, each with the figures an operator looks for (worker, owner,
// trigger, outcome) and times in the order things happened. Tracing off makes nothing.
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { InMemorySpanExporter, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import pino from 'pino';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { deferflow, type Deferflow } from '../../src/index.ts';
import { resolveDeferflowConfig } from '../../src/internals.ts';
import { dropTestDatabases, freshDatabaseUrl, testDialects } from '../support/databases.ts';
import { PACKAGE_ENTRY, PACKAGE_TRIGGERS } from '../support/processes.ts';
import { processScratch } from '../support/process-scratch.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

const TRACED_DAG = `
import { BaseOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
import { DateTimeTrigger, TimeDeltaTrigger } from ${JSON.stringify(PACKAGE_TRIGGERS)};
class Waits extends BaseOperator {
  execute() { return this.defer({ trigger: new TimeDeltaTrigger({ delta: 0.3 }), method: 'resume' }); } // a DateTimeTrigger once serialized
  resume() { return 'resumed'; }
}
class Plain extends BaseOperator { execute() { return 'plain'; } }
class EndedByTrigger extends BaseOperator {
  execute() { return this.defer({ trigger: new DateTimeTrigger({ moment: new Date(Date.now() + 200), endFromTrigger: true }), method: 'never' }); }
}
export const dag = new Dag({ dagId: 'traced' }).add(new Waits({ taskId: 'waits' }), new Plain({ taskId: 'plain' }), new EndedByTrigger({ taskId: 'ended' }));
`;

/** A span's epoch ms, from the SDK's [seconds, nanoseconds]. */
const ms = (time: [number, number]) => time[0] * 1000 + time[1] / 1e6;

describe.each(testDialects)('traces of an embedded deferflow on %s', (dialect) => {
  let app: Deferflow | null = null;
  afterEach(async () => {
    await app?.stop();
    app = null;
  });

  it('make each task instance one trace: the try that deferred, the trigger run and the resume are children of its root span', async () => {
    const project = scratch.dir(`traced-${dialect}`);
    mkdirSync(path.join(project, 'dags'));
    writeFileSync(path.join(project, 'dags/traced.mts'), TRACED_DAG);
    const exporter = new InMemorySpanExporter();
    app = await deferflow({
      databaseUrl: await freshDatabaseUrl(dialect),
      dagsFolder: path.join(project, 'dags'),
      worker: { concurrency: 2, pollInterval: 0.2, shutdownGrace: 0 },
      scheduler: { pollInterval: 0.2 },
      triggerer: { pollInterval: 0.2 },
      logger: pino({ level: 'warn' }),
      tracing: { exporter, serviceName: 'traced-test' },
    });
    const runId = await app.triggerDagRun('traced');
    expect(await app.waitForDagRun('traced', runId)).toBe('success');
    const workerJobId = app.worker!.jobId;
    const triggererJobId = app.triggerer!.jobId;
    const waitsId = (await app.database.db.selectFrom('task_instance').select('id').where('task_id', '=', 'waits').executeTakeFirstOrThrow()).id;
    // Stopping sends what is batched.
    await app.stop();
    app = null;

    const spans = exporter.getFinishedSpans();
    const named = (name: string) => spans.filter((span) => span.name === name);
    const only = (name: string, taskId?: string): ReadableSpan => {
      const found = named(name).filter((span) => taskId === undefined || span.attributes['deferflow.task_id'] === taskId);
      expect(found, `spans named ${name} among ${spans.map((span) => span.name).join(', ')}`).toHaveLength(1);
      return found[0]!;
    };
    const root = only('traced.waits');
    const executed = only('execute traced.waits');
    const trigger = only('trigger deferflow.triggers.DateTimeTrigger', 'waits');
    const resumed = only('resume traced.waits');
    const { traceId, spanId: rootSpanId } = root.spanContext();
    expect(root.parentSpanContext).toBeUndefined();
    expect(root.resource.attributes['service.name']).toBe('traced-test');
    expect(root.attributes).toMatchObject({
      'deferflow.dag_id': 'traced',
      'deferflow.run_id': runId,
      'deferflow.task_id': 'waits',
      'deferflow.map_index': -1,
      'deferflow.task_instance_id': waitsId,
      'deferflow.state': 'success',
      'deferflow.tries': 1,
    });
    for (const child of [executed, trigger, resumed]) {
      expect(child.spanContext().traceId, child.name).toBe(traceId);
      expect(child.parentSpanContext?.spanId, child.name).toBe(rootSpanId);
    }
    expect(executed.attributes).toMatchObject({ 'deferflow.try_number': 1, 'deferflow.worker.job_id': workerJobId, 'deferflow.outcome': 'deferred' });
    const deferredEvent = executed.events.find((event) => event.name === 'deferred');
    expect(deferredEvent?.attributes).toMatchObject({
      'deferflow.trigger.classpath': 'deferflow.triggers.DateTimeTrigger',
      'deferflow.resume_method': 'resume',
    });
    expect(trigger.attributes).toMatchObject({
      'deferflow.trigger.id': deferredEvent!.attributes!['deferflow.trigger.id'],
      'deferflow.triggerer.job_id': triggererJobId,
      'deferflow.trigger.outcome': 'event',
      'deferflow.try_number': 1,
    });
    const firedAt = ms(trigger.events.find((event) => event.name === 'event')!.time);
    expect(resumed.attributes).toMatchObject({ 'deferflow.resume_method': 'resume', 'deferflow.outcome': 'success', 'deferflow.try_number': 1 });
    // In the order it happened: made, run, deferred, waited (0.3 s) on the triggerer, fired, resumed, ended.
    expect(ms(root.startTime)).toBeLessThanOrEqual(ms(executed.startTime));
    expect(ms(executed.startTime)).toBeLessThanOrEqual(ms(trigger.startTime));
    expect(firedAt - ms(executed.startTime)).toBeGreaterThanOrEqual(250);
    expect(firedAt).toBeLessThanOrEqual(ms(resumed.startTime));
    expect(ms(resumed.endTime)).toBeLessThanOrEqual(ms(root.endTime));

    // The other task instance is a trace of its own.
    const plainRoot = only('traced.plain');
    expect(plainRoot.spanContext().traceId).not.toBe(traceId);
    expect(only('execute traced.plain').parentSpanContext?.spanId).toBe(plainRoot.spanContext().spanId);
    // One a trigger ended (endFromTrigger) has its root from the triggerer: no try resumed it.
    const endedRoot = only('traced.ended');
    expect(endedRoot.attributes).toMatchObject({ 'deferflow.state': 'success' });
    const endedBy = only('trigger deferflow.triggers.DateTimeTrigger', 'ended');
    expect(endedBy.parentSpanContext?.spanId).toBe(endedRoot.spanContext().spanId);
    expect(endedBy.spanContext().traceId).toBe(endedRoot.spanContext().traceId);
    expect(ms(endedRoot.endTime)).toBeGreaterThanOrEqual(ms(endedBy.endTime));
    expect(named('resume traced.ended')).toHaveLength(0);
    expect(spans).toHaveLength(9);
  }, 60_000);
});

describe('tracing options', () => {
  it('are off unless given, and refuse what is not an exporter by name', () => {
    expect(resolveDeferflowConfig({}).tracing).toBeNull();
    expect(resolveDeferflowConfig({ tracing: false }).tracing).toBeNull();
    expect(resolveDeferflowConfig({ tracing: { exporter: 'otlp' } }).tracing).toEqual({ exporter: 'otlp' });
    expect(() => resolveDeferflowConfig({ tracing: { exporter: 'jaeger' as never } })).toThrow(
      "tracing.exporter: expected 'otlp', 'console' or an OpenTelemetry SpanExporter, got string \"jaeger\"",
    );
    expect(() => resolveDeferflowConfig({ tracing: { exporter: 'otlp', sample: 1 } as never })).toThrow('tracing.sample: is not an option');
  });
});
