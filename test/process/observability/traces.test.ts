// Traces as an operator gets them from separate daemons: a worker, a scheduler and a triggerer,
// each its own process started with DEFERFLOW_TRACES=otlp and the standard OTEL_* variables,
// send OTLP over HTTP to a collector (here a small HTTP server keeping what it is sent). A task
// that defers is one trace across the three processes: the try that deferred (from the worker),
// the trigger's run (from the triggerer that owned it) and the resume are children of the task
// instance's root span, though no process told another of its spans.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { dropTestDatabases, oneDialect, testDialects } from '../../support/databases.ts';
import { waitFor } from '../../support/fixtures.ts';
import { processScratch } from '../../support/process-scratch.ts';
import { PACKAGE_ENTRY, PACKAGE_TRIGGERS, REPO_ROOT, spawnDeferflow, stopCleanly } from '../../support/processes.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

const TRACED_DAG = `
import { BaseOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
import { TimeDeltaTrigger } from ${JSON.stringify(PACKAGE_TRIGGERS)};
class Waits extends BaseOperator {
  execute() { return this.defer({ trigger: new TimeDeltaTrigger({ delta: 0.5 }), method: 'resume' }); }
  resume() { return 'resumed'; }
}
export const dag = new Dag({ dagId: 'traced' }).add(new Waits({ taskId: 'waits' }));
`;

/** A span as OTLP/JSON carries it, with its attributes and its resource's service.name made plain. */
interface ReceivedSpan {
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId: string;
  readonly name: string;
  readonly startMs: number;
  readonly endMs: number;
  readonly attributes: Record<string, string | number>;
  readonly events: { readonly name: string; readonly atMs: number; readonly attributes: Record<string, string | number> }[];
  readonly service: string;
}

interface OtlpValue {
  stringValue?: string;
  intValue?: string | number;
  boolValue?: boolean;
}
type OtlpAttributes = { key: string; value: OtlpValue }[] | undefined;

function plain(attributes: OtlpAttributes): Record<string, string | number> {
  return Object.fromEntries(
    (attributes ?? []).map(({ key, value }) => [key, value.stringValue ?? (value.intValue === undefined ? String(value.boolValue) : Number(value.intValue))]),
  );
}

/** An OTLP/HTTP collector of JSON trace exports: POST /v1/traces, kept in order. */
async function startCollector(): Promise<{ server: Server; endpoint: string; spans: ReceivedSpan[] }> {
  const spans: ReceivedSpan[] = [];
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      if (request.url === '/v1/traces' && request.headers['content-type']?.startsWith('application/json')) {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as any;
        for (const resourceSpans of body.resourceSpans ?? []) {
          const service = String(plain(resourceSpans.resource?.attributes)['service.name']);
          for (const scopeSpans of resourceSpans.scopeSpans ?? [])
            for (const span of scopeSpans.spans ?? [])
              spans.push({
                traceId: span.traceId,
                spanId: span.spanId,
                parentSpanId: span.parentSpanId ?? '',
                name: span.name,
                startMs: Number(BigInt(span.startTimeUnixNano) / 1_000_000n),
                endMs: Number(BigInt(span.endTimeUnixNano) / 1_000_000n),
                attributes: plain(span.attributes),
                events: (span.events ?? []).map((event: { name: string; timeUnixNano: string; attributes: OtlpAttributes }) => ({
                  name: event.name,
                  atMs: Number(BigInt(event.timeUnixNano) / 1_000_000n),
                  attributes: plain(event.attributes),
                })),
                service,
              });
        }
        response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      } else {
        response.writeHead(404).end();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, spans };
}

describe.each(testDialects)('OpenTelemetry traces from the daemons on %s', (dialect) => {
  it('a deferral through a worker and a triggerer in processes of their own is one trace, its spans children of the task instance', async () => {
    const db = await scratch.database(dialect);
    const dags = scratch.dir('traced-dags');
    writeFileSync(path.join(dags, 'traced.mts'), TRACED_DAG);
    const collector = await startCollector();
    try {
      // Spans are batched for 200 ms (the SDK's own variable), and sent at the latest on SIGTERM.
      const env = {
        DEFERFLOW_TRACES: 'otlp',
        OTEL_EXPORTER_OTLP_ENDPOINT: collector.endpoint,
        OTEL_BSP_SCHEDULE_DELAY: '200',
        OTEL_SERVICE_NAME: 'traced-daemons',
      };
      const fast = ['--db', db.url, '--poll-interval', '0.2'];
      const worker = spawnDeferflow(['worker', ...fast, '--dags', dags], env);
      const scheduler = spawnDeferflow(['scheduler', ...fast], env);
      const triggerer = spawnDeferflow(['triggerer', ...fast], env);
      const [workerJobId, , triggererJobId] = await Promise.all([worker.waitForJob(20_000), scheduler.waitForJob(20_000), triggerer.waitForJob(20_000)]);
      await waitFor(async () => (await db.db.selectFrom('serialized_dag').select('dag_id').executeTakeFirst()) !== undefined, {
        what: 'the worker to process the DAG file',
        timeoutMs: 20_000,
      });
      const trigger = spawnDeferflow(['dags', 'trigger', 'traced', '--db', db.url]);
      expect(await trigger.exitWithin()).toEqual({ code: 0, signal: null });
      await waitFor(async () => (await db.db.selectFrom('task_instance').select('state').executeTakeFirst())?.state === 'success', {
        what: 'the task to defer, fire and resume to success',
        timeoutMs: 30_000,
      });
      const ti = await db.db.selectFrom('task_instance').select(['id', 'run_id']).executeTakeFirstOrThrow();
      // The root span is the worker's once the task instance ended; the others come as they end.
      await waitFor(() => collector.spans.some((span) => span.name === 'traced.waits'), { what: 'the root span at the collector', timeoutMs: 10_000 });
      await stopCleanly([worker, scheduler, triggerer]);

      const only = (name: string): ReceivedSpan => {
        const found = collector.spans.filter((span) => span.name === name);
        expect(found, `spans named ${name} among ${collector.spans.map((span) => span.name).join(', ')}`).toHaveLength(1);
        return found[0]!;
      };
      const root = only('traced.waits');
      const executed = only('execute traced.waits');
      const waited = only('trigger deferflow.triggers.DateTimeTrigger');
      const resumed = only('resume traced.waits');
      expect(root.parentSpanId).toBe('');
      expect(root.attributes).toMatchObject({ 'deferflow.task_instance_id': ti.id, 'deferflow.run_id': ti.run_id, 'deferflow.state': 'success' });
      for (const span of [executed, waited, resumed]) {
        expect(span.traceId, span.name).toBe(root.traceId);
        expect(span.parentSpanId, span.name).toBe(root.spanId);
        expect(span.service).toBe('traced-daemons');
      }
      // Each from the daemon that did it.
      expect(executed.attributes).toMatchObject({ 'deferflow.worker.job_id': workerJobId, 'deferflow.outcome': 'deferred' });
      expect(executed.events.map((event) => event.name)).toContain('deferred');
      expect(waited.attributes).toMatchObject({ 'deferflow.triggerer.job_id': triggererJobId, 'deferflow.trigger.outcome': 'event' });
      expect(resumed.attributes).toMatchObject({ 'deferflow.worker.job_id': workerJobId, 'deferflow.outcome': 'success' });
      // The wait is on the triggerer, and the resume after its event.
      const firedAt = waited.events.find((event) => event.name === 'event')!.atMs;
      expect(firedAt - executed.startMs).toBeGreaterThanOrEqual(450);
      expect(resumed.startMs).toBeGreaterThanOrEqual(firedAt);
      expect(root.startMs).toBeLessThanOrEqual(executed.startMs);
      expect(root.endMs).toBeGreaterThanOrEqual(resumed.endMs);
    } finally {
      collector.server.close();
    }
  }, 90_000);
});

// Free when off: a process whose tracing is off loads none of OpenTelemetry's packages itself (a hook on
// the module loader, given to the process as a user gives Node options, reports every one that
// is); the same run with --traces console loads them and prints its spans.
describe.each(oneDialect)('tracing off on %s', (dialect) => {
  it('loads no OpenTelemetry package in a standalone run; with --traces console it does, and prints the spans', async () => {
    const db = await scratch.database(dialect);
    const dags = scratch.dir('traced-off-dags');
    writeFileSync(path.join(dags, 'traced.mts'), TRACED_DAG);
    const hook = path.join(scratch.dir('traced-off-hook'), 'report-otel-loads.cjs');
    writeFileSync(
      hook,
      `const Module = require('node:module');
const load = Module._load;
Module._load = function (request, parent, ...rest) {
  if (typeof request === 'string' && request.startsWith('@opentelemetry/')) process.stderr.write('loaded ' + request + ' by ' + (parent && parent.filename) + '\\n');
  return load.call(this, request, parent, ...rest);
};
`,
    );
    const run = async (extra: readonly string[]) => {
      const standalone = spawnDeferflow(
        ['standalone', '--db', db.url, '--dags', dags, '--trigger-dag', 'traced', '--exit-when-done', '--http-port', 'off', ...extra],
        {
          NODE_OPTIONS: `--require ${hook}`,
        },
      );
      expect(await standalone.exitWithin(60_000)).toEqual({ code: 0, signal: null });
      return standalone;
    };
    // (prom-client looks for @opentelemetry/api itself, for exemplars, when a project has it: not deferflow's load.)
    const deferflowLoads = (proc: { stderr: string[] }) =>
      proc.stderr.filter((line) => line.startsWith('loaded @opentelemetry/') && line.includes(` by ${path.join(REPO_ROOT, 'dist')}`));
    const off = await run([]);
    expect(deferflowLoads(off)).toEqual([]);
    const on = await run(['--traces', 'console']);
    expect(deferflowLoads(on).map((line) => line.split(' ')[1])).toEqual(
      expect.arrayContaining(['@opentelemetry/api', '@opentelemetry/sdk-trace-base', '@opentelemetry/resources']),
    );
    expect(on.text.join('\n')).toContain("name: 'execute traced.waits'");
  }, 90_000);
});
