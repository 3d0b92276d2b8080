/**
 * Traces through OpenTelemetry: a task instance's life is one trace, whatever processes it
 * crossed. Each try's run on a worker (`execute` or `resume`, with its outcome and, for a
 * deferral, the trigger it waits on), each trigger's run on a triggerer (its owner, when it
 * started and when its event came) and the task instance itself, from its making to its end, are
 * spans of it.
 *
 * The processes share nothing but the database, and a span can only be ended by the process
 * that started it, so the trace's ids are derived from the task instance's identity: every
 * process computes the same trace id and the same id for the root span, and makes its own spans
 * children of that root at once. The root itself is emitted when the task instance ends, with
 * its whole life's times, by the process that ended it (the worker). Choosing a span's id is
 * something only the tracer provider's IdGenerator can do, which is why deferflow builds its own
 * provider around the exporter it is given rather than taking one.
 *
 * Off by default, and free when off: no tracer, no span objects, no query (see Tracing.open).
 * The packages (@opentelemetry/api, @opentelemetry/sdk-trace-base, @opentelemetry/resources, and
 * @opentelemetry/exporter-trace-otlp-http for `otlp`) are optional peers, loaded when tracing is on.
 */
import { createHash, randomBytes } from 'node:crypto';
import type * as OtelApi from '@opentelemetry/api';
import type * as OtelSdk from '@opentelemetry/sdk-trace-base';
import type * as OtelResources from '@opentelemetry/resources';
import { optionalPackage } from '../../vocabulary/lazy-package.ts';
import { describeThrown, MissingPackageError } from '../../vocabulary/errors.ts';
import { createRequire } from 'node:module';

/** What tracing needs installed; `otlp` needs OTLP_PACKAGE too. */
const TRACING_PACKAGES = ['@opentelemetry/api', '@opentelemetry/sdk-trace-base', '@opentelemetry/resources'] as const;
const OTLP_PACKAGE = '@opentelemetry/exporter-trace-otlp-http';

/** DF_MISSING_PACKAGE naming every one of `names` not installed, so that one `npm install` does. */
function requirePackages(names: readonly string[]): void {
  const require = createRequire(import.meta.url);
  const missing = names.filter((name) => {
    try {
      require.resolve(name);
      return false;
    } catch {
      return true;
    }
  });
  if (missing.length > 0) throw new MissingPackageError(missing, 'tracing');
}

const otelApi = optionalPackage<typeof OtelApi>('@opentelemetry/api', 'tracing');
const otelSdk = optionalPackage<typeof OtelSdk>('@opentelemetry/sdk-trace-base', 'tracing');
const otelResources = optionalPackage<typeof OtelResources>('@opentelemetry/resources', 'tracing');
const otlpHttp = optionalPackage<{ OTLPTraceExporter: new () => TraceExporter }>(OTLP_PACKAGE, 'tracing to OTLP');

/**
 * Where spans go: a `SpanExporter` of the OpenTelemetry SDK (OTLPTraceExporter, Jaeger's, an
 * InMemorySpanExporter in tests). Typed by shape so that deferflow's declarations need no
 * OpenTelemetry package.
 */
export interface TraceExporter {
  /** Sends a batch of finished spans (the SDK's ReadableSpans), then calls back with its result (code 0: sent). */
  // biome-ignore lint/suspicious/noExplicitAny: the SDK's ReadableSpan, which deferflow does not name
  export(spans: any[], resultCallback: (result: { code: number; error?: Error }) => void): void;
  /** Sends what it holds and stops; deferflow calls it only for an exporter it made (`otlp`, `console`). */
  shutdown(): Promise<void>;
  /** Sends what it holds now. */
  forceFlush?(): Promise<void>;
}

/** Tracing's configuration: where spans go, and the service they say they come from. */
export interface TracingConfig {
  /**
   * An exporter of your own, or `otlp`: OTLP over HTTP (JSON) to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
   * or OTEL_EXPORTER_OTLP_ENDPOINT (default http://localhost:4318), needing
   * @opentelemetry/exporter-trace-otlp-http; or `console`: each span printed on stdout.
   */
  readonly exporter: TraceExporter | 'otlp' | 'console';
  /** The spans' `service.name`. @default OTEL_SERVICE_NAME, else `deferflow` */
  readonly serviceName?: string;
}

/** What names a task instance, and so its trace. */
export interface TracedTaskInstance {
  /** Its row id. */
  readonly id: number;
  /** Its DAG's id. */
  readonly dagId: string;
  /** Its DAG run's id. */
  readonly runId: string;
  /** Its task's id. */
  readonly taskId: string;
  /** Its map index; -1 when not mapped. */
  readonly mapIndex: number;
}

/** A trace's id and its root span's, as the W3C trace context writes them (hex). */
export interface TraceIds {
  /** 32 hex digits. */
  readonly traceId: string;
  /** The root span's: 16 hex digits. */
  readonly spanId: string;
}

/**
 * The ids of a task instance's trace and of its root span: a hash of its identity (its row id and
 * what names it), so every process derives the same without asking the database.
 */
export function traceIdsOf(taskInstance: TracedTaskInstance): TraceIds {
  const { id, dagId, runId, taskId, mapIndex } = taskInstance;
  const digest = createHash('sha256').update(`deferflow\0${id}\0${dagId}\0${runId}\0${taskId}\0${mapIndex}`).digest('hex');
  // All-zero ids are invalid in W3C trace context; a hash is never that in practice, but be sure.
  return { traceId: nonZero(digest.slice(0, 32)), spanId: nonZero(digest.slice(32, 48)) };
}

function nonZero(hex: string): string {
  return /^0+$/.test(hex) ? `${hex.slice(0, -1)}1` : hex;
}

/**
 * Random ids, except while `fixed` is set: then the ids of a task instance's root span (set just
 * around one synchronous startSpan, so no other span can take them).
 */
class TaskInstanceIdGenerator {
  fixed: TraceIds | null = null;

  generateTraceId(): string {
    return this.fixed?.traceId ?? randomBytes(16).toString('hex');
  }

  generateSpanId(): string {
    return this.fixed?.spanId ?? randomBytes(8).toString('hex');
  }
}

/** The attributes naming a task instance, on every span of its trace. */
function taskInstanceAttributes(taskInstance: TracedTaskInstance): OtelApi.Attributes {
  return {
    'deferflow.dag_id': taskInstance.dagId,
    'deferflow.run_id': taskInstance.runId,
    'deferflow.task_id': taskInstance.taskId,
    'deferflow.map_index': taskInstance.mapIndex,
    'deferflow.task_instance_id': taskInstance.id,
  };
}

/** A try's run on a worker, open from its claim until its outcome is written. */
export interface TrySpan {
  /** The try deferred on this trigger, to resume at `method`. */
  deferred(trigger: { readonly id: number; readonly classpath: string; readonly method: string; readonly timeoutMs: number | null }): void;
  /** What the try came to (a state), and the error it failed with. */
  outcome(state: string, error?: unknown): void;
  /** Ends the span (now). */
  end(): void;
}

/** A trigger's run on a triggerer, as the span of one task instance waiting on it. */
export interface TriggerRunSpan {
  /** The task instance waiting on it: whose trace the span is in. */
  readonly taskInstance: TracedTaskInstance;
  /** The try of it that deferred. */
  readonly tryNumber: number;
  /** The trigger's row id. */
  readonly triggerId: number;
  /** The trigger's class, as its row names it. */
  readonly classpath: string;
  /** The triggerer's job that ran it (its owner); null before its job row was registered. */
  readonly triggererJobId: number | null;
  /** The triggerer's host. */
  readonly hostname: string;
  /** Epoch ms: when this triggerer started running it. */
  readonly startedAt: number;
  /** Epoch ms: when its run ended. */
  readonly endedAt: number;
  /** event: it fired; failed: it threw (its task instances fail); stopped: let go without an outcome (released, deleted, shutdown). */
  readonly outcome: 'event' | 'failed' | 'stopped';
}

/**
 * A process's tracing: a tracer provider of deferflow's own around the configured exporter
 * (batching spans), and the spans deferflow's daemons make. One per process, shared by its
 * daemons; shutdown() sends what is left.
 */
export class Tracing {
  readonly #api: typeof OtelApi;
  readonly #provider: OtelSdk.BasicTracerProvider;
  readonly #tracer: OtelApi.Tracer;
  readonly #ids: TaskInstanceIdGenerator;
  /** An exporter deferflow made (`otlp`, `console`) is shut down with it; one it was given is only flushed: it is its owner's. */
  readonly #ownsExporter: boolean;

  private constructor(config: TracingConfig, env: NodeJS.ProcessEnv) {
    requirePackages(config.exporter === 'otlp' ? [...TRACING_PACKAGES, OTLP_PACKAGE] : TRACING_PACKAGES);
    const api = otelApi();
    const sdk = otelSdk();
    const exporter =
      config.exporter === 'otlp' ? new (otlpHttp().OTLPTraceExporter)() : config.exporter === 'console' ? new sdk.ConsoleSpanExporter() : config.exporter;
    this.#api = api;
    this.#ownsExporter = typeof config.exporter === 'string';
    this.#ids = new TaskInstanceIdGenerator();
    this.#provider = new sdk.BasicTracerProvider({
      idGenerator: this.#ids,
      resource: otelResources().resourceFromAttributes({ 'service.name': config.serviceName ?? env.OTEL_SERVICE_NAME ?? 'deferflow' }),
      spanProcessors: [new sdk.BatchSpanProcessor(exporter as OtelSdk.SpanExporter)],
    });
    this.#tracer = this.#provider.getTracer('deferflow');
  }

  /** Tracing as configured; null when it is off (no config). DF_MISSING_PACKAGE names a package to install. */
  static open(config: TracingConfig | null, env: NodeJS.ProcessEnv = process.env): Tracing | null {
    return config === null ? null : new Tracing(config, env);
  }

  /** The context whose parent is the task instance's root span (see the top of this file). */
  #underRoot(taskInstance: TracedTaskInstance): OtelApi.Context {
    const { traceId, spanId } = traceIdsOf(taskInstance);
    return this.#api.trace.setSpanContext(this.#api.ROOT_CONTEXT, { traceId, spanId, traceFlags: this.#api.TraceFlags.SAMPLED, isRemote: true });
  }

  /** Opens the span of a try's run on a worker (`resumeMethod`: it resumes there after a deferral). */
  startTry(
    taskInstance: TracedTaskInstance,
    run: {
      readonly tryNumber: number;
      readonly resumeMethod: string | null;
      readonly workerJobId: number;
      readonly hostname: string;
      readonly startedAt: number;
    },
  ): TrySpan {
    const api = this.#api;
    const span = this.#tracer.startSpan(
      `${run.resumeMethod === null ? 'execute' : 'resume'} ${taskInstance.dagId}.${taskInstance.taskId}`,
      {
        startTime: run.startedAt,
        attributes: {
          ...taskInstanceAttributes(taskInstance),
          'deferflow.try_number': run.tryNumber,
          'deferflow.worker.job_id': run.workerJobId,
          'host.name': run.hostname,
          ...(run.resumeMethod === null ? {} : { 'deferflow.resume_method': run.resumeMethod }),
        },
      },
      this.#underRoot(taskInstance),
    );
    return {
      deferred(trigger) {
        span.addEvent('deferred', {
          'deferflow.trigger.id': trigger.id,
          'deferflow.trigger.classpath': trigger.classpath,
          'deferflow.resume_method': trigger.method,
          ...(trigger.timeoutMs === null ? {} : { 'deferflow.trigger.timeout_ms': trigger.timeoutMs }),
        });
      },
      outcome(state, error) {
        span.setAttribute('deferflow.outcome', state);
        if (error === undefined) return;
        const { error: message } = describeThrown(error);
        span.addEvent('exception', { 'exception.message': message, 'exception.type': error instanceof Error ? error.name : typeof error });
        span.setStatus({ code: api.SpanStatusCode.ERROR, message });
      },
      end() {
        span.end();
      },
    };
  }

  /** Emits the span of a trigger's run for one task instance waiting on it, once the run ended. */
  recordTriggerRun(run: TriggerRunSpan, eventAt: number | null): void {
    const span = this.#tracer.startSpan(
      `trigger ${run.classpath}`,
      {
        startTime: run.startedAt,
        attributes: {
          ...taskInstanceAttributes(run.taskInstance),
          'deferflow.try_number': run.tryNumber,
          'deferflow.trigger.id': run.triggerId,
          'deferflow.trigger.classpath': run.classpath,
          ...(run.triggererJobId === null ? {} : { 'deferflow.triggerer.job_id': run.triggererJobId }),
          'host.name': run.hostname,
          'deferflow.trigger.outcome': run.outcome,
        },
      },
      this.#underRoot(run.taskInstance),
    );
    if (eventAt !== null) span.addEvent('event', {}, eventAt);
    if (run.outcome === 'failed') span.setStatus({ code: this.#api.SpanStatusCode.ERROR, message: 'the trigger failed; its task instances fail' });
    span.end(run.endedAt);
  }

  /** Emits a task instance's root span, from when it was made to its end in `state`. */
  recordTaskInstance(
    taskInstance: TracedTaskInstance,
    life: { readonly state: string; readonly tries: number; readonly madeAt: number; readonly endedAt: number },
  ): void {
    this.#ids.fixed = traceIdsOf(taskInstance);
    let span: OtelApi.Span;
    try {
      span = this.#tracer.startSpan(
        `${taskInstance.dagId}.${taskInstance.taskId}`,
        {
          root: true,
          startTime: life.madeAt,
          attributes: { ...taskInstanceAttributes(taskInstance), 'deferflow.state': life.state, 'deferflow.tries': life.tries },
        },
        this.#api.ROOT_CONTEXT,
      );
    } finally {
      this.#ids.fixed = null;
    }
    if (life.state === 'failed') span.setStatus({ code: this.#api.SpanStatusCode.ERROR, message: 'the task instance failed' });
    span.end(life.endedAt);
  }

  /** Sends the spans not yet sent; then shuts down the exporter if deferflow made it (see #ownsExporter). */
  async shutdown(): Promise<void> {
    if (this.#ownsExporter) await this.#provider.shutdown();
    else await this.#provider.forceFlush();
  }
}
