import type * as PromClient from 'prom-client';
import type { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { lazyPackage } from '../../vocabulary/lazy-package.ts';
import type { DatabaseFigures } from './database-figures.ts';

const prom = lazyPackage<typeof PromClient>('prom-client');

/**
 * deferflow's Prometheus metrics. Names follow Airflow's metric of the same meaning (as the
 * statsd exporter turns `triggers.running` into `airflow_triggers_running`), with the
 * `deferflow_` prefix, so dashboards built for Airflow carry over by a prefix change. Node's
 * default process metrics (`process_*`, `nodejs_*`) are added when a process serves /metrics.
 *
 * One Metrics per process (per embedded app): each component asks for its own group, which is
 * registered on first use, so a triggerer shows no worker series. Updating a counter or a
 * histogram is a few arithmetic operations; gauges that describe a state are read when scraped.
 */
export class Metrics {
  readonly registry: Registry = new (prom().Registry)();
  #triggerer: TriggererMetrics | null = null;
  #worker: WorkerMetrics | null = null;
  #scheduler: SchedulerMetrics | null = null;
  #jobs: JobMetrics | null = null;
  #database: DatabaseGauges | null = null;
  #processMetrics = false;

  triggerer(): TriggererMetrics {
    this.#triggerer ??= new TriggererMetrics(this.registry);
    return this.#triggerer;
  }

  worker(): WorkerMetrics {
    this.#worker ??= new WorkerMetrics(this.registry);
    return this.#worker;
  }

  scheduler(): SchedulerMetrics {
    this.#scheduler ??= new SchedulerMetrics(this.registry);
    return this.#scheduler;
  }

  /** Heartbeat age per job (triggerer, worker, scheduler) running in this process. */
  jobs(): JobMetrics {
    this.#jobs ??= new JobMetrics(this.registry);
    return this.#jobs;
  }

  /**
   * Gauges counted in the database when scraped (deferred task instances, unfinished DAG runs by
   * state): `read` runs at most once per `minIntervalMs`, and a read that fails or hangs keeps
   * the last figures, so a scrape during an outage still answers.
   */
  databaseGauges(read: () => Promise<DatabaseFigures>, minIntervalMs = 1_000): void {
    this.#database ??= new DatabaseGauges(this.registry, read, minIntervalMs);
  }

  /** Node's default metrics (CPU, memory, event loop lag, GC), once. */
  collectProcessMetrics(): void {
    if (this.#processMetrics) return;
    this.#processMetrics = true;
    prom().collectDefaultMetrics({ register: this.registry });
  }

  /** The Prometheus text exposition of every metric registered. */
  text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}

export class TriggererMetrics {
  /** Airflow: triggers.running. */
  readonly running: Gauge;
  /** Airflow: triggerer.capacity_left. */
  readonly capacityLeft: Gauge;
  /** Airflow: triggers.blocked_main_thread (a count); the seconds blocked are their own counter. */
  readonly blockedMainThread: Counter<'classpath'>;
  readonly blockedMainThreadSeconds: Counter<'classpath'>;
  /** Airflow: triggers.failed. */
  readonly failed: Counter<'classpath'>;
  /** Airflow: triggers.succeeded (the trigger yielded its event). */
  readonly succeeded: Counter<'classpath'>;
  /** Deferred task instances failed by their deferral timeout. */
  readonly timedOut: Counter;
  /** Deferred task instances the reconciler found stranded (no trigger row, no timeout) and failed: should stay 0. */
  readonly stranded: Counter;
  /** Trigger events whose task instances' move was committed. */
  readonly eventsWritten: Counter;
  /** From a trigger's event to the commit moving its task instances. */
  readonly eventCommitLatency: Histogram;
  /** Triggers claimed by one pass (passes that claimed none are not counted). */
  readonly claimBatchSize: Histogram;
  #sources: TriggererSources | null = null;

  constructor(registry: Registry) {
    const sources = () => this.#sources;
    this.running = new (prom().Gauge)({
      name: 'deferflow_triggers_running',
      help: 'Triggers running on this triggerer',
      registers: [registry],
      collect() {
        const from = sources();
        if (from) this.set(from.running());
      },
    });
    this.capacityLeft = new (prom().Gauge)({
      name: 'deferflow_triggerer_capacity_left',
      help: 'Triggers this triggerer may still claim (capacity minus triggers held)',
      registers: [registry],
      collect() {
        const from = sources();
        if (from) this.set(Math.max(0, from.capacity - from.held()));
      },
    });
    this.blockedMainThread = new (prom().Counter)({
      name: 'deferflow_triggers_blocked_main_thread_total',
      help: "Trigger steps that held the event loop longer than the triggerer's block threshold",
      labelNames: ['classpath'],
      registers: [registry],
    });
    this.blockedMainThreadSeconds = new (prom().Counter)({
      name: 'deferflow_triggers_blocked_main_thread_seconds_total',
      help: 'Seconds the event loop was held by trigger steps past the block threshold',
      labelNames: ['classpath'],
      registers: [registry],
    });
    this.failed = new (prom().Counter)({
      name: 'deferflow_triggers_failed_total',
      help: 'Triggers that failed (threw, ended without an event, could not be built); their task instances resume at the failure method',
      labelNames: ['classpath'],
      registers: [registry],
    });
    this.succeeded = new (prom().Counter)({
      name: 'deferflow_triggers_succeeded_total',
      help: 'Triggers that yielded their event',
      labelNames: ['classpath'],
      registers: [registry],
    });
    this.timedOut = new (prom().Counter)({
      name: 'deferflow_triggers_timed_out_total',
      help: 'Deferred task instances failed because their deferral timeout passed',
      registers: [registry],
    });
    this.stranded = new (prom().Counter)({
      name: 'deferflow_stranded_deferrals_total',
      help: 'Deferred task instances found stranded (no trigger row, no timeout: they would wait forever) and failed; should stay 0',
      registers: [registry],
    });
    this.eventsWritten = new (prom().Counter)({
      name: 'deferflow_trigger_events_written_total',
      help: 'Trigger events whose task instances were moved in a committed transaction',
      registers: [registry],
    });
    this.eventCommitLatency = new (prom().Histogram)({
      name: 'deferflow_trigger_event_commit_latency_seconds',
      help: 'From a trigger yielding its event to the commit that moved its task instances',
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [registry],
    });
    this.claimBatchSize = new (prom().Histogram)({
      name: 'deferflow_triggerer_claim_batch_size',
      help: 'Triggers claimed by one triggerer pass that claimed any',
      buckets: [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000],
      registers: [registry],
    });
  }

  /** What the gauges read when scraped. */
  observe(sources: TriggererSources): void {
    this.#sources = sources;
  }

  /** The charts' figures (see DaemonSampler): triggers running and capacity, and the running totals of events, failures and blocked-loop time. */
  async figures(): Promise<Record<string, number>> {
    const [events, failures, blockedSeconds] = await Promise.all([sum(this.eventsWritten), sum(this.failed), sum(this.blockedMainThreadSeconds)]);
    return {
      running: this.#sources?.running() ?? 0,
      capacity: this.#sources?.capacity ?? 0,
      events_total: events,
      failures_total: failures,
      blocked_ms_total: Math.round(blockedSeconds * 1000),
    };
  }
}

/** A counter's value over all its labels. */
async function sum(counter: Counter<string>): Promise<number> {
  return (await counter.get()).values.reduce((total, entry) => total + entry.value, 0);
}

interface TriggererSources {
  /** Triggers running (not yet fired or failed). */
  readonly running: () => number;
  /** Triggers held: running, or fired with their outcome not yet written (they count against capacity). */
  readonly held: () => number;
  readonly capacity: number;
}

export class WorkerMetrics {
  /** Airflow: executor.open_slots. */
  readonly openSlots: Gauge;
  /** Airflow: executor.running_tasks. */
  readonly runningTasks: Gauge;
  /** Airflow: ti.finish.<dag_id>.<task_id>.<state>; here by state and operator (deferred included). */
  readonly outcomes: Counter<'state' | 'operator'>;
  /** Airflow: task duration; one run of a try on a worker (a deferred try counts each run). */
  readonly duration: Histogram<'operator'>;
  #sources: { running: () => number; slots: number } | null = null;

  constructor(registry: Registry) {
    const sources = () => this.#sources;
    this.openSlots = new (prom().Gauge)({
      name: 'deferflow_executor_open_slots',
      help: 'Free slots of this worker (its concurrency minus task instances running)',
      registers: [registry],
      collect() {
        const from = sources();
        if (from) this.set(Math.max(0, from.slots - from.running()));
      },
    });
    this.runningTasks = new (prom().Gauge)({
      name: 'deferflow_executor_running_tasks',
      help: 'Task instances this worker runs now',
      registers: [registry],
      collect() {
        const from = sources();
        if (from) this.set(from.running());
      },
    });
    this.outcomes = new (prom().Counter)({
      name: 'deferflow_ti_finish_total',
      help: 'Tries (or their runs, for deferred) that ended on this worker, by the state they left the task instance in',
      labelNames: ['state', 'operator'],
      registers: [registry],
    });
    this.duration = new (prom().Histogram)({
      name: 'deferflow_task_duration_seconds',
      help: 'How long task code ran on this worker, from the start of a run of a try to its outcome',
      labelNames: ['operator'],
      buckets: [0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600],
      registers: [registry],
    });
  }

  observe(sources: { running: () => number; slots: number }): void {
    this.#sources = sources;
  }
}

export class SchedulerMetrics {
  /** Airflow: scheduler.scheduler_loop_duration. */
  readonly passDuration: Histogram;
  /** DAG runs this scheduler finished, by their final state. */
  readonly dagRunsFinished: Counter<'state'>;

  constructor(registry: Registry) {
    this.passDuration = new (prom().Histogram)({
      name: 'deferflow_scheduler_loop_duration_seconds',
      help: 'How long one scheduler pass took',
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers: [registry],
    });
    this.dagRunsFinished = new (prom().Counter)({
      name: 'deferflow_dag_runs_finished_total',
      help: 'DAG runs this scheduler finished, by final state',
      labelNames: ['state'],
      registers: [registry],
    });
  }
}

export interface HeartbeatSource {
  readonly jobType: string;
  /** When the last heartbeat was written (epoch ms); null before the first. */
  lastHeartbeatAt(): number | null;
}

export class JobMetrics {
  readonly #sources = new Set<HeartbeatSource>();

  constructor(registry: Registry) {
    const sources = this.#sources;
    new (prom().Gauge)({
      name: 'deferflow_job_heartbeat_age_seconds',
      help: "Seconds since this process's job last wrote its heartbeat (peers judge it dead past their threshold)",
      labelNames: ['job_type'],
      registers: [registry],
      collect() {
        this.reset();
        const now = Date.now();
        for (const source of sources) {
          const at = source.lastHeartbeatAt();
          if (at !== null) this.set({ job_type: source.jobType }, (now - at) / 1000);
        }
      },
    });
  }

  observe(source: HeartbeatSource): void {
    this.#sources.add(source);
  }
}

/** How long a scrape waits for the database's counts before answering with the last ones. */
const DATABASE_READ_WAIT_MS = 2_000;

class DatabaseGauges {
  #last: DatabaseFigures | null = null;
  #readAt = 0;
  #reading: Promise<void> | null = null;

  constructor(
    registry: Registry,
    private readonly read: () => Promise<DatabaseFigures>,
    private readonly minIntervalMs: number,
  ) {
    const counts = () => this.#current();
    new (prom().Gauge)({
      name: 'deferflow_task_instances_deferred',
      help: 'Task instances deferred now, counted in the database (every triggerer and DAG)',
      registers: [registry],
      async collect() {
        const last = await counts();
        if (last) this.set(last.deferredTaskInstances);
      },
    });
    new (prom().Gauge)({
      name: 'deferflow_task_instances_awaiting_input',
      help: "Task instances awaiting a person's input now (no worker slot, no trigger), counted in the database",
      registers: [registry],
      async collect() {
        const last = await counts();
        if (last) this.set(last.awaitingInput);
      },
    });
    new (prom().Gauge)({
      name: 'deferflow_dag_runs',
      help: 'Unfinished DAG runs by state, counted in the database',
      labelNames: ['state'],
      registers: [registry],
      async collect() {
        const last = await counts();
        if (!last) return;
        this.set({ state: 'queued' }, last.dagRuns.queued);
        this.set({ state: 'running' }, last.dagRuns.running);
      },
    });
    new (prom().Gauge)({
      name: 'deferflow_queue_unserved_work',
      help: 'Work waiting in a queue that no live daemon serves, by queue and kind (task_instances: no live worker; triggers: no live triggerer); a series per such queue, none when all are served',
      labelNames: ['queue', 'kind'],
      registers: [registry],
      async collect() {
        const last = await counts();
        if (!last) return;
        this.reset();
        for (const work of last.unservedWork) this.set({ queue: work.queue, kind: work.kind }, work.count);
      },
    });
  }

  async #current(): Promise<DatabaseFigures | null> {
    if (this.#reading === null && Date.now() - this.#readAt >= this.minIntervalMs) {
      this.#readAt = Date.now();
      this.#reading = this.read()
        .then((counts) => {
          this.#last = counts;
        })
        .catch(() => {})
        .finally(() => {
          this.#reading = null;
        });
    }
    if (this.#reading !== null) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([this.#reading, new Promise((resolve) => (timer = setTimeout(resolve, DATABASE_READ_WAIT_MS)))]);
      clearTimeout(timer);
    }
    return this.#last;
  }
}
