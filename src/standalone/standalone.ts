import type { Logger } from 'pino';
import type { Database } from '../db/connect.ts';
import { keepDagFolderProcessed, serializedDagSource } from '../dags/dag-processor.ts';
import { Scheduler } from '../scheduler/scheduler.ts';
import type { TriggerRegistry } from '../triggers/registry.ts';
import { Triggerer } from '../triggerer/triggerer.ts';
import { dagFileResolver } from '../worker/dag-file-resolver.ts';
import { Worker } from '../worker/worker.ts';
import type { StandaloneOptions } from './options.ts';

/** Shortest gap between two wake-ups of the scheduler or the triggerer. */
const WAKE_GAP_MS = 100;

/** `wake`, at once if it has not run for `gapMs`, else once when the gap is over. */
function atMostEvery(gapMs: number, wake: () => void): () => void {
  let last = 0;
  let pending: NodeJS.Timeout | null = null;
  return () => {
    if (pending) return;
    const wait = last + gapMs - performance.now();
    if (wait <= 0) {
      last = performance.now();
      wake();
      return;
    }
    pending = setTimeout(() => {
      pending = null;
      last = performance.now();
      wake();
    }, wait);
    pending.unref();
  };
}

/**
 * Scheduler, worker and triggerer in one process on one database (`deferflow standalone`).
 * Each is the same component the separate commands run, with its own job row; here they also
 * wake each other when one makes work for another (a deferral for the triggerer, an event for
 * the worker, a finished task for the scheduler) instead of waiting for their next poll.
 */
export class Standalone {
  readonly worker: Worker;
  readonly scheduler: Scheduler;
  readonly triggerer: Triggerer;
  #dagProcessing: { stop(): void } | null = null;

  constructor(
    private readonly database: Database,
    readonly options: StandaloneOptions,
    registry: TriggerRegistry,
    private readonly log: Logger,
  ) {
    this.triggerer = new Triggerer(database, options.triggerer, registry, log.child({ component: 'triggerer' }));
    this.scheduler = new Scheduler(database, options.scheduler, serializedDagSource(database), log.child({ component: 'scheduler' }));
    this.worker = new Worker(database, options.worker, dagFileResolver(database), log.child({ component: 'worker' }));
    // The worker claims on every wake-up (a free slot is worth filling at once); a scheduler or
    // triggerer pass reads a whole run or every owned trigger, so a burst of finished tasks
    // wakes each of them at most once per WAKE_GAP_MS.
    const wakeWorker = () => this.worker.wake();
    const wakeScheduler = atMostEvery(WAKE_GAP_MS, () => this.scheduler.wake());
    const wakeTriggerer = atMostEvery(WAKE_GAP_MS, () => this.triggerer.wake());
    this.worker.onWork = () => {
      wakeTriggerer();
      wakeScheduler();
    };
    this.scheduler.onWork = () => {
      wakeWorker();
      wakeTriggerer();
    };
    this.triggerer.onWork = () => {
      wakeWorker();
      wakeScheduler();
    };
  }

  async start(): Promise<void> {
    this.#dagProcessing = await keepDagFolderProcessed(this.database, this.options.worker.dagsFolder, this.options.worker.dagProcessIntervalMs, this.log);
    await this.triggerer.start();
    await this.scheduler.start();
    await this.worker.start();
  }

  /** The worker first (its running tasks finish or are handed back), then the scheduler, then the triggerer. */
  async stop(): Promise<void> {
    this.#dagProcessing?.stop();
    await this.worker.stop();
    await this.scheduler.stop();
    await this.triggerer.stop();
  }
}
