import { setImmediate as nextTurn } from 'node:timers/promises';
import { livenessThresholds } from '../liveness-options.ts';
import { readDatabaseFigures } from '../../services/observability/database-figures.ts';
import { queueListText } from '../../model/queues.ts';
import type { Logger } from 'pino';
import type { Database } from '../../database/connect.ts';
import { redactDatabaseUrl } from '../../database/database-url.ts';
import { errorFields, TriggerRuntimeError } from '../../vocabulary/errors.ts';
import { TRIGGERER_JOB_TYPE } from '../../database/schema.ts';
import { type TriggerRow, openStores, type Stores } from '../../storage/index.ts';
import { InterruptibleSleep } from '../../vocabulary/time/interruptible-sleep.ts';
import { Daemon, PUSHED_POLL_MAX_MS, WOKEN_PASS_PACING, type DaemonRuntime } from '../../services/jobs/daemon.ts';
import { PassPacer } from '../../vocabulary/time/pass-pacer.ts';
import type { JobRow } from '../../services/jobs/job-row.ts';
import type { TriggerRegistry } from '../../authoring/triggers/registry.ts';
import type { TriggererOptions } from './options.ts';
import { OutcomeWriter } from './outcome-writer.ts';
import { TriggerTracing } from './trigger-tracing.ts';
import { WatchWriter } from './watch-writer.ts';
import { TriggerRunner } from './trigger-runner.ts';
import { TriggerLogWriter } from './trigger-log-writer.ts';
import { Watchdog } from './watchdog.ts';
import { TriggerQuarantinedError } from '../../vocabulary/errors.ts';
import { DagRunStateBatcher } from '../../model/dag-run-state-batcher.ts';
import { SignalService } from '../../services/signals/signal-service.ts';

/** Most rows one claim statement takes (see #pass). */
const CLAIM_STATEMENT_ROWS = 1000;
/** Longest between two id-by-id comparisons of owned and held triggers when digests agree. */
const FULL_RECONCILE_MS = 60_000;
/** Rows a statement of the reconcile and the cleanup sweep reads (~10–30 ms on SQLite), with a turn of the loop between. */
const RECONCILE_PAGE = 10_000;
/** How many ids a line about many triggers names (the rest are counted). */
const LOGGED_IDS = 20;

/*
 * A triggerer's life is every daemon's (src/services/jobs/daemon.ts: start once, stop once, a job row).
 * While running, three loops share the event loop with the triggers:
 * - the pass (every poll-interval, at once again after a full claim, when a peer's liveness lock
 *   is freed, and when a peer's heartbeat would pass the threshold): release the triggers of
 *   dead peers (and of owners with no job row); when what it owns differs from what it runs,
 *   cancel what it runs but no longer owns and start what it owns but does not run; claim more
 *   up to capacity; now and then delete triggers nothing waits on;
 * - the heartbeat (every heartbeat-interval);
 * - the timeout sweep (at the next deferral deadline, at most timeoutSweepMs apart).
 * Outcomes (events, failures) go through the OutcomeWriter as they happen.
 *
 * stop(): stop claiming, cancel triggers (cleanup runs), write outcomes already produced,
 * release ownership so peers take over at once, mark the job row ended.
 */

/** The stores a triggerer uses: its job row, its triggers and what they move, signals (pruned), trigger logs, DAG run states (sensors' reads), the waiting-work gauges. */
export type TriggererStores = Pick<Stores, 'jobs' | 'triggers' | 'signals' | 'logs' | 'dagRuns' | 'maintenance'>;

/** The triggerer daemon: claims trigger rows up to its capacity, runs them on its event loop, and writes their events; heartbeats, and takes over the triggers of dead peers. */
export class Triggerer extends Daemon<TriggererStores> {
  readonly #runner: TriggerRunner;
  readonly #writer: OutcomeWriter;
  readonly #watchWriter: WatchWriter;
  readonly #triggerLogs: TriggerLogWriter;
  readonly #watchdog: Watchdog | null;
  /** Every trigger's this.dagRunStates() reads, gathered into at most one round of queries a second. */
  readonly #dagRunStates: DagRunStateBatcher;
  #passLoop: Promise<void> | null = null;
  readonly #pause = new InterruptibleSleep();
  /** Paces the passes wake-ups start (one per deferral): see WOKEN_PASS_PACING. */
  readonly #pacer = new PassPacer(WOKEN_PASS_PACING);
  #sweepTimer: NodeJS.Timeout | null = null;
  #sweeping: Promise<void> | null = null;
  /** When the next timeout sweep is due (epoch ms). */
  #sweepAt = 0;
  /** A deferral was pushed while a sweep was reading: its deadline may not have been read. */
  #sweepAgainSoon = false;
  #lastCleanupAt = 0;
  #lastFullReconcileAt = 0;
  /** When the oldest heartbeat of a live peer owning triggers passes the threshold, if it is not renewed (clock ms); null: no such peer. */
  #nextOwnerStaleAt: number | null = null;

  constructor(
    database: Database,
    /** Its options, resolved. */
    readonly options: TriggererOptions,
    registry: TriggerRegistry,
    log: Logger,
    /** Metrics and clock shared with the other components of its process. */
    runtime: DaemonRuntime = {},
  ) {
    super(
      database,
      runtime.stores ?? openStores(database),
      log,
      {
        kind: 'triggerer',
        jobType: TRIGGERER_JOB_TYPE,
        hostname: options.hostname,
        capacity: options.capacity,
        queues: queueListText(options.queues),
        heartbeatIntervalMs: options.heartbeatIntervalMs,
        healthThresholdMs: options.healthCheckThresholdMs,
        sampleIntervalMs: options.sampleIntervalMs,
      },
      runtime,
    );
    const triggererMetrics = this.metrics.triggerer();
    triggererMetrics.observe({ running: () => this.#runner.runningCount, held: () => this.#runner.size, capacity: options.capacity });
    const thresholds = { ...livenessThresholds(), triggererMs: options.healthCheckThresholdMs };
    this.metrics.databaseGauges(() => readDatabaseFigures(this.storage, this.liveness, thresholds));
    this.#triggerLogs = new TriggerLogWriter(this.storage, log);
    this.#watchdog =
      options.watchdogLimitMs > 0
        ? new Watchdog({ limitMs: options.watchdogLimitMs, quarantineAfter: options.quarantineAfter }, options.databaseUrl, database.adapter, log)
        : null;
    const watchdog = this.#watchdog;
    this.#dagRunStates = new DagRunStateBatcher((keys) => this.storage.dagRuns.readDagRunStates(keys));
    // The one way outcomes go: runner → writer (its OutcomeSink) → trigger store. What was
    // written comes back as the writer's events, never as calls from inside a write.
    this.#writer = new OutcomeWriter(this.storage, log, {
      batchSize: 2000,
      concurrency: database.adapter.concurrentWrites,
      retryDelayMs: 1000,
      maxRetryDelayMs: 30_000,
      refusesValues: database.adapter.refusesValues,
      unavailable: database.adapter.unavailable,
      metrics: triggererMetrics,
    });
    this.#watchWriter = new WatchWriter(
      this.storage,
      log,
      () => this.jobId,
      () => this.onWork?.(),
    );
    this.#runner = new TriggerRunner(registry, log, this.#writer, {
      blockThresholdMs: options.blockThresholdMs,
      dagRunStates: (query) => this.#dagRunStates.read(query),
      listenSignal: (key, listener, listenOptions) => SignalService.of(database, log).listen(key, listener, listenOptions),
      metrics: triggererMetrics,
      triggerLogs: this.#triggerLogs,
      stepping: watchdog ? (triggerId) => watchdog.stepping(triggerId) : undefined,
      watchSink: this.#watchWriter,
      runs: this.tracing ? new TriggerTracing(this.tracing, this.storage, log, { jobId: () => this.jobId, hostname: options.hostname }) : undefined,
    });
    this.#writer.events.on('written', (triggerIds) => {
      for (const id of triggerIds) this.#runner.forget(id);
    });
    this.#writer.events.on('database-call', () => this.#runner.markLoopEdge());
    this.#writer.events.on('moved', () => this.onWork?.());
  }

  /**
   * Called after task instances left deferred (events, failures, timeouts): a worker or a
   * scheduler may have work now. Standalone wires it to their wake().
   */
  onWork: (() => void) | null = null;

  /** Runs the next pass (claims new triggers) now instead of after the poll interval. */
  wake(): void {
    if (this.isRunning) this.#pause.wake();
  }

  /** A triggerer whose process is gone may own triggers: the next pass releases and claims them. */
  protected override onPeerGone(): void {
    this.wake();
  }

  /** A pushed wake-up: a new deferral (its timeout may be the next deadline) or a trigger to claim. */
  #pushedWake(): void {
    this.wake();
    // The sweep re-reads the next deadline within timeoutSweepMs, as it does without pushes (not
    // at once: a burst of deferrals would make a sweep each).
    if (this.#sweeping !== null) this.#sweepAgainSoon = true;
    else if (this.isRunning && this.#sweepAt - Date.now() > this.options.timeoutSweepMs) {
      clearTimeout(this.#sweepTimer!);
      this.#scheduleSweep(this.options.timeoutSweepMs);
    }
  }

  /** Triggers held now: running, or fired with the outcome not yet written. */
  get heldTriggerIds(): number[] {
    return this.#runner.heldIds();
  }

  /** The charts' figures: triggers running and capacity, events, failures and blocked-loop time. */
  protected override readFigures(): Promise<Record<string, number>> {
    return this.metrics.triggerer().figures();
  }

  /** After each heartbeat: the database answers, so writes waiting out a backoff are tried now. */
  protected override onHeartbeat(): void {
    this.#runner.markLoopEdge();
    this.#writer.retryNow();
  }

  /** Starts its loop once its job row is registered (Daemon.start calls it). */
  protected run(job: JobRow): void {
    this.log.info(
      {
        job_id: job.id,
        config: {
          ...this.options,
          databaseUrl: redactDatabaseUrl(this.options.databaseUrl),
          signalHttpToken: this.options.signalHttpToken && '***',
        },
      },
      `triggerer ${job.id} started on ${this.database.adapter.name} (capacity ${this.options.capacity})`,
    );
    this.#runner.start();
    this.#watchdog?.start();
    this.subscribeWakeups(this.database, { triggerer: () => this.#pushedWake() }, this.options.push);
    this.#scheduleSweep(0);
    this.#passLoop = this.#runPasses();
  }

  /** Stops claiming, cancels its triggers, writes what they produced and releases them to peers (Daemon.stop calls it, once). */
  protected async shutdown(job: JobRow): Promise<void> {
    this.log.info({ job_id: job.id }, 'triggerer stopping: no more claims, cancelling triggers');
    job.stopHeartbeat();
    clearTimeout(this.#sweepTimer!);
    this.#pause.wake();
    await this.#passLoop;
    await this.#sweeping;
    // One grace for both: cleanups, then writing what already fired. Past it, peers take over
    // (and re-run what was not written), which is what the process exit deadline protects.
    const graceEndsAt = Date.now() + this.options.cleanupGraceMs;
    await this.#runner.cancelAll(this.options.cleanupGraceMs);
    this.#watchWriter.stop();
    await this.#writer.drain(Math.max(0, graceEndsAt - Date.now()));
    this.#writer.close();
    await this.#triggerLogs.close();
    this.#runner.close();
    await this.#watchdog?.stop();
    this.#dagRunStates.close(new TriggerRuntimeError('the triggerer stopped'));
    try {
      const released = await this.storage.triggers.releaseOwnedTriggers(job.id);
      this.log.info({ job_id: job.id, released_triggers: released }, `triggerer ${job.id} released ${released} trigger(s) to peers`);
    } catch (error) {
      this.log.error(
        { job_id: job.id, ...errorFields(error, 'DF_DATABASE') },
        'could not release triggers on stop; peers take them after the health-check threshold',
      );
    }
  }

  /**
   * Fails the task instances of quarantined triggers (see watchdog.ts): they never run again.
   * Any triggerer does it, on its first pass and at each cleanup; a second one finds nothing
   * left to move.
   */
  async #failQuarantined(): Promise<void> {
    for (const trigger of await this.storage.triggers.listQuarantinedTriggers(1000)) {
      const error = new TriggerQuarantinedError(
        `trigger ${trigger.id} (${trigger.classpath}) held a triggerer's event loop past the watchdog limit ` +
          `(${this.options.watchdogLimitMs / 1000} s) ${trigger.culpritCount} time(s): it is quarantined and never run again; ` +
          'fix its code (a step must await, not compute or wait synchronously), then defer again',
      );
      this.log.error({ code: error.code, trigger_id: trigger.id, classpath: trigger.classpath, culprit_count: trigger.culpritCount }, error.message);
      this.metrics.triggerer().failed.inc({ classpath: trigger.classpath });
      this.#writer.add({
        kind: 'failure',
        triggerId: trigger.id,
        failure: { code: error.code, error: `TriggerQuarantinedError: ${error.message}`, traceback: null, reason: 'trigger_failure' },
      });
    }
  }

  async #runPasses(): Promise<void> {
    while (this.isRunning) {
      this.#pacer.passStarted();
      let again = false;
      try {
        again = await this.#pass();
      } catch (error) {
        this.log.error(errorFields(error, 'DF_DATABASE'), 'triggerer pass failed; retrying next pass');
      }
      this.#runner.markLoopEdge();
      if (!this.isRunning) break;
      // A full claim goes on at once; otherwise a storm of wake-ups (one per deferral) shares a
      // pass every WOKEN_PASS_PACING.gapMs.
      const untilStale = this.#nextOwnerStaleAt === null ? Number.POSITIVE_INFINITY : Math.max(0, this.#nextOwnerStaleAt - this.clock.now());
      await this.#pause.sleep(again ? 0 : Math.min(this.safetyNetPause(this.database, this.options.pollIntervalMs), untilStale), this.#pacer.floorMs());
    }
  }

  /** One pass; true when it claimed a full batch (so more may be waiting). */
  async #pass(): Promise<boolean> {
    const jobId = this.jobId!;
    const { storage, options } = this;
    // Owners found dead: their liveness lock let go (killed, cut off), their heartbeat past the
    // threshold (frozen), their job ended, or no job row at all (pruned or deleted by hand).
    const { owners, own: ownedDigest } = await storage.triggers.readTriggerOwnership(jobId);
    // What it holds, taken in the same turn as the read: the two digests compare one moment.
    this.#runner.markLoopEdge();
    const held = this.#runner.heldDigest();
    // A frozen owner keeps its lock: its heartbeat tells, once past the threshold. The next pass
    // comes no later than that moment for the owner whose heartbeat is oldest.
    const { dead: deadOwners, nextStaleAt } = await this.deadAmong(owners, options.healthCheckThresholdMs);
    this.#nextOwnerStaleAt = nextStaleAt;
    if (deadOwners.length > 0) {
      const released = await storage.triggers.releaseTriggersOfOwners(deadOwners);
      if (released > 0) this.log.info({ released_triggers: released, dead_triggerers: deadOwners }, `released ${released} trigger(s) of dead triggerers`);
    }

    // What this triggerer owns against what it holds: a digest each (one row from the database)
    // tells whether anything changed; only then, or now and then as a guard against a digest
    // collision, are the two sets compared id by id.
    let ownedCount = ownedDigest.count;
    if (ownedDigest.count !== held.count || ownedDigest.idSum !== held.idSum || Date.now() - this.#lastFullReconcileAt >= FULL_RECONCILE_MS) {
      ownedCount = await this.#reconcile(jobId);
      this.#lastFullReconcileAt = Date.now();
    }
    if (!this.isRunning) return false;

    const room = Math.min(options.claimsPerLoop, options.capacity - ownedCount);
    let claimedTotal = 0;
    // Claim in statements of at most CLAIM_STATEMENT_ROWS so no single (on SQLite, synchronous)
    // statement holds the loop long, letting due triggers fire in between.
    // Each claim's triggers start once their kwargs are opened, which with encryption happens on
    // another thread while the next claim runs; the pass ends when all have started.
    const starting: Promise<void>[] = [];
    while (claimedTotal < room && this.isRunning) {
      const want = Math.min(CLAIM_STATEMENT_ROWS, room - claimedTotal);
      // A triggerer that owned nothing until this claim wakes its peers with it: a peer watches
      // the heartbeats only of owners it read at its last pass, and an idle peer's next pass may
      // be a safety net (20 s) away; this one frozen right after the claim would then be taken
      // over that late instead of at the threshold. One wake-up per idle-to-busy change.
      const wakePeers = ownedCount === 0 && claimedTotal === 0;
      const { claimed, rows, examined, orphansDeleted } = await storage.triggers.claimTriggers(jobId, want, { wakePeers, queues: options.queues });
      this.#runner.markLoopEdge();
      starting.push(rows.then((opened) => this.#startClaimed(opened)));
      claimedTotal += claimed;
      if (orphansDeleted > 0)
        this.log.info({ deleted_triggers: orphansDeleted }, `deleted ${orphansDeleted} unowned trigger(s) no task instance waits on instead of claiming them`);
      // Fewer looked at than asked for: nothing more is waiting. Nothing claimed nor deleted
      // (orphans a peer holds locked): try again next pass rather than spin.
      if (examined < want || claimed + orphansDeleted === 0) break;
      await nextTurn();
    }
    await Promise.all(starting);
    if (claimedTotal > 0) {
      this.metrics.triggerer().claimBatchSize.observe(claimedTotal);
      this.log.info({ claimed: claimedTotal, running: this.#runner.runningCount }, `claimed ${claimedTotal} trigger(s); running ${this.#runner.runningCount}`);
    }
    const claimedFull = room > 0 && claimedTotal === room;

    if (Date.now() - this.#lastCleanupAt >= options.cleanupIntervalMs) {
      this.#lastCleanupAt = Date.now();
      // Page by page, as the reconcile: the whole table in one statement held the loop.
      let deleted = 0;
      await this.#pageByPage(
        (afterId) => storage.triggers.sweepUnusedTriggers(afterId, RECONCILE_PAGE),
        (page) => {
          deleted += page.deleted;
          return page.lastId;
        },
      );
      if (deleted > 0) this.log.info({ deleted_triggers: deleted }, `deleted ${deleted} trigger(s) no task instance waits on`);
      const pruned = await storage.signals.pruneSignals(this.clock.now() - options.signalRetentionMs);
      if (pruned > 0) this.log.info({ pruned_signals: pruned }, `pruned ${pruned} signal(s) older than ${options.signalRetentionMs / 1000} s`);
      await this.#failQuarantined();
      // The reconciler: every deferred task instance has a trigger row, or a timeout to end it.
      const stranded = await storage.triggers.failStrandedDeferrals(this.clock.now());
      if (stranded > 0) {
        this.metrics.triggerer().stranded.inc(stranded);
        this.log.error(
          { code: 'DF_DEFERRAL_STRANDED', stranded_task_instances: stranded },
          `${stranded} deferred task instance(s) had no trigger row and no timeout (they would have waited forever): failed with DF_DEFERRAL_STRANDED`,
        );
      }
    }
    return claimedFull;
  }

  #startClaimed(rows: readonly TriggerRow[]): void {
    for (const row of rows) this.#runner.startTrigger(row);
    this.#runner.markLoopEdge();
  }

  /**
   * Stops what it runs but no longer owns (deleted, or taken over while this process looked
   * dead) and starts what it owns but does not run. Returns how many triggers it owns.
   */
  async #reconcile(jobId: number): Promise<number> {
    // Page by page, with a turn of the loop between pages: a million owned ids read at once held
    // the loop for over a second on SQLite.
    const owned: number[] = [];
    let held = 0;
    await this.#pageByPage(
      (afterId) => this.storage.triggers.listOwnedTriggerIds(jobId, { afterId, limit: RECONCILE_PAGE }),
      (page) => {
        for (const id of page) {
          owned.push(id);
          if (this.#runner.has(id)) held++;
        }
        return page.length < RECONCILE_PAGE ? null : page[page.length - 1]!;
      },
    );
    // A stop that began meanwhile cut the read short: what it holds is not lost but about to be
    // cancelled and released by the stop, and a partial list would call it taken over.
    if (!this.isRunning) return owned.length;
    // Everything it holds is among what it owns (ids are distinct): nothing to stop. Otherwise
    // (some were taken over or deleted) the ids held are held against the ids owned.
    const ownedSet = held === this.#runner.size ? null : new Set(owned);
    const lost = ownedSet ? this.#runner.heldIds().filter((id) => !ownedSet.has(id) && this.#runner.isRunning(id)) : [];
    if (lost.length > 0) {
      // A row still there belongs to another triggerer now; a row gone was abandoned (killed).
      const elsewhere = new Set(await this.storage.triggers.existingTriggerIds(lost));
      // A trigger taken over is news, each one; triggers whose rows went (cleared, timed out, a
      // composite wait done and its losers) come by the thousand and are one line: a line each
      // held the loop for ~0.4 s a page as 10,000 composite waits ended (bench:waits).
      const gone = lost.filter((id) => !elsewhere.has(id));
      if (gone.length > 0) {
        this.log.info(
          { trigger_ids: gone.slice(0, LOGGED_IDS), stopped: gone.length },
          `${gone.length} trigger(s) are no longer ours (nothing waits on them); stopping them`,
        );
      }
      for (const id of lost) {
        const killed = !elsewhere.has(id);
        if (!killed)
          this.log.info(
            { trigger_id: id, killed },
            this.#runner.watcherState(id)
              ? `watcher ${id} is no longer ours (taken over, or released: no DAG that is neither paused nor deleted watches it); stopping it`
              : `trigger ${id} is no longer ours (taken over); stopping it`,
          );
        void this.#runner.cancel(id, killed);
      }
    }
    if (!this.isRunning) return owned.length;
    const notRunning = owned.filter((id) => !this.#runner.has(id));
    if (notRunning.length > 0) {
      for (const row of await this.storage.triggers.loadOwnedTriggers(jobId, notRunning)) this.#runner.startTrigger(row);
      this.#runner.markLoopEdge();
    }
    return owned.length;
  }

  /**
   * Reads the trigger table a page at a time while the triggerer runs, from id 0: `read` reads the
   * page after an id, `take` uses it and says the last id read (null: that was the last page). A
   * turn of the event loop between pages lets due triggers fire.
   */
  async #pageByPage<Page>(read: (afterId: number) => Promise<Page>, take: (page: Page) => number | null): Promise<void> {
    for (let afterId: number | null = 0; afterId !== null && this.isRunning; ) {
      const page = await read(afterId);
      this.#runner.markLoopEdge();
      afterId = take(page);
      if (afterId !== null) await nextTurn();
    }
  }

  #scheduleSweep(delayMs: number): void {
    if (!this.isRunning) return;
    this.#sweepAt = Date.now() + delayMs;
    this.#sweepTimer = setTimeout(() => {
      this.#sweeping = this.#sweepTimeouts().finally(() => (this.#sweeping = null));
    }, delayMs);
  }

  /**
   * Fails deferrals past their timeout, then sleeps until the next deadline (at most
   * timeoutSweepMs; while pushes work, a deferral wakes it early, so the safety net is longer).
   */
  async #sweepTimeouts(): Promise<void> {
    // While pushes work, every deferral wakes the sweep to re-read the deadline (#pushedWake), so
    // its safety net is the daemons' longest.
    const { timeoutSweepMs } = this.options;
    let nextInMs = this.wakeupsPushed(this.database) ? Math.max(timeoutSweepMs, PUSHED_POLL_MAX_MS) : timeoutSweepMs;
    this.#sweepAgainSoon = false;
    try {
      // The deadline first: an idle sweep is that one read.
      let deadline = await this.storage.triggers.nextDeferralDeadline();
      if (deadline !== null && deadline <= this.clock.now()) {
        const failed = await this.storage.triggers.failTimedOutDeferrals(this.clock.now());
        if (failed > 0) {
          this.metrics.triggerer().timedOut.inc(failed);
          this.log.info({ timed_out: failed }, `${failed} deferred task instance(s) timed out`);
          this.onWork?.();
        }
        deadline = await this.storage.triggers.nextDeferralDeadline();
      }
      this.#runner.markLoopEdge();
      if (deadline !== null) nextInMs = Math.max(0, Math.min(nextInMs, deadline - this.clock.now() + 1));
    } catch (error) {
      this.log.error(errorFields(error, 'DF_DATABASE'), 'timeout sweep failed');
    }
    // A push that came while it read was not lost: the deferral it told of committed after the
    // read began, perhaps with the nearest deadline, so the sweep looks again as a push would have made it.
    if (this.#sweepAgainSoon) nextInMs = Math.min(nextInMs, timeoutSweepMs);
    this.#scheduleSweep(nextInMs);
  }
}
