import { fork, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { Logger } from 'pino';
import { describeThrown, TaskCrashedError } from '../../vocabulary/errors.ts';
import type { ClaimedTaskInstance, StartedTaskInstance } from '../../storage/index.ts';
import type { SmartSensors } from '../../authoring/sensors/base-sensor.ts';
import type { TaskServices } from './claimed-task.ts';
import { fromWireError, RUNNER_PRELOAD_ENV, RUNNER_SMART_SENSORS_ENV, toWireError, type FromRunner, type ToRunner } from './runner-protocol.ts';
import { sharedEntries } from '../../authoring/user-code/shared-modules.ts';
import type { PreparedTask, TaskResult, TaskRunner } from './task-runner.ts';
import { RunSettingsCache, type RunSettings } from './run-settings-cache.ts';
import type { TryLoggers } from './task-log-writer.ts';
import type { UserFileCompiler } from '../../authoring/user-code/compile-user-file.ts';
import { CompiledUserFiles } from './compiled-user-files.ts';

export interface ProcessTaskRunnerOptions {
  /** Tasks a runner process runs before it is replaced (leaks in task code do not pile up). */
  readonly maxTasks: number;
  /**
   * A runner's memory ceiling, in MB: its V8 heap limit (a task allocating past it fails with
   * DF_TASK_CRASHED, out of memory), and the resident size past which it is replaced after a task.
   */
  readonly maxMemoryMb: number;
  /** How long an aborted task (timeout, a signal's stop, shutdown) has to end before its runner is killed, in ms. */
  readonly killGraceMs: number;
  /** The worker's slots: at most this many runners run tasks at once. */
  readonly slots: number;
  readonly smartSensors?: SmartSensors;
}

/**
 * Idle runners kept however quiet the worker is (the next task need not wait for one to start),
 * the first started with the worker. No other spare is started ahead: each costs CPU to start
 * and about 65 MB to keep, and a worker whose tasks run one after another needs one runner.
 */
const KEEP_IDLE = 1;
/** An idle runner beyond KEEP_IDLE is retired after this long without a task. */
const IDLE_RETIRE_MS = 60_000;
const IDLE_CHECK_MS = 10_000;
/**
 * Runner processes starting at once, at most: one. Starting one costs about a fifth of a second
 * of CPU; more at once take it from the warm runners serving a burst of short tasks meanwhile.
 * Measured on 2 cores, interleaved runs: `npm start` (200 short tasks, 4 slots) 11.5-12.1 s with
 * one at a time against 12.1-12.5 s with two (slot time 6.1-7.7 against 7.4-9.4 s), though two
 * bring a peer's 10 handed-back long tasks back running sooner (bench:failover: 1.5 against
 * 2.0 s). When a start cost most of a second: bench:runtime 11.5 s with one at a time, 13.6 s
 * with two, 15.6 s unbounded.
 */
const MAX_STARTING = 1;
/**
 * What starting a runner is taken to cost until one has been timed (spawn to ready): another
 * runner starts only for a task that has waited that long for one (see #startForWaiters).
 */
const FIRST_START_ESTIMATE_MS = 500;

/**
 * The runner's entry: bundled beside this module (dist/src/bundle/, see scripts/build.ts). When
 * deferflow runs from its TypeScript source (its own tests and benchmarks), the build's runner if
 * there is one (compiling every module with tsx in each runner costs seconds), else the source
 * through tsx.
 */
function runnerEntry(): { file: string; execArgv: string[] } {
  const here = fileURLToPath(import.meta.url);
  if (!here.endsWith('.ts')) return { file: path.join(path.dirname(here), 'task-runner-main.js'), execArgv: [] };
  const built = path.resolve(path.dirname(here), '../../../dist/src/bundle/task-runner-main.js');
  if (existsSync(built)) return { file: built, execArgv: [] };
  const tsx = path.join(path.dirname(createRequire(import.meta.url).resolve('tsx/package.json')), 'dist/loader.mjs');
  return { file: path.join(path.dirname(here), 'task-runner-main.ts'), execArgv: ['--import', pathToFileURL(tsx).href] };
}

/** The runner process ended before it answered; `message` says how. */
class RunnerEnded extends Error {}

/** What a runner's run is told as it goes: its task's log lines and database calls. */
interface RunHooks {
  log(text: string): void;
  call(message: Extract<FromRunner, { type: 'call' }>): void;
}

/** One task runner process, one task at a time. */
class RunnerProcess {
  readonly child: ChildProcess;
  tasksRun = 0;
  /** Never given another task (aborted, over its limits, or crashed). */
  retiring = false;
  hooks: RunHooks | null = null;
  #waiter: { resolve(message: FromRunner): void; reject(error: RunnerEnded): void } | null = null;
  /** When it last went idle (for retiring runners a quiet worker no longer needs). */
  idleSince = 0;
  #stderrTail = '';
  /** How it ended, once it has: a sentence for the crash error. */
  ended: string | null = null;
  readonly exited: Promise<void>;
  /** Said it is ready (deferflow loaded); until then it is starting. */
  ready = false;

  constructor(
    entry: { file: string; execArgv: string[] },
    options: ProcessTaskRunnerOptions,
    private readonly log: Logger,
    private readonly onReady: (runner: RunnerProcess) => void,
    private readonly compile: UserFileCompiler,
  ) {
    this.child = fork(entry.file, [], {
      execArgv: [...entry.execArgv, `--max-old-space-size=${options.maxMemoryMb}`],
      env: {
        ...process.env,
        [RUNNER_SMART_SENSORS_ENV]: JSON.stringify(options.smartSensors ?? null),
        // deferflow's entry points as this process loaded them (the package's, when it is the
        // package that runs): the runner loads the same files and shares them with DAG files.
        [RUNNER_PRELOAD_ENV]: JSON.stringify(sharedEntries()),
      },
      serialization: 'advanced',
      stdio: ['ignore', 'inherit', 'pipe', 'ipc'],
    });
    this.child.stderr!.on('data', (chunk: Buffer) => {
      // What the task printed goes where the worker's own output goes; the tail explains a crash.
      process.stderr.write(chunk);
      this.#stderrTail = (this.#stderrTail + chunk.toString()).slice(-4096);
    });
    this.child.on('message', (message: FromRunner) => this.#receive(message));
    this.exited = new Promise((resolve) => {
      this.child.once('exit', (code, signal) => {
        this.ended = this.#describeExit(code, signal, options.maxMemoryMb);
        this.retiring = true;
        this.#waiter?.reject(new RunnerEnded(this.ended));
        this.#waiter = null;
        resolve();
      });
    });
    this.child.on('error', (error) => this.log.warn({ error: describeThrown(error).error }, 'a task runner process reported an error'));
  }

  get alive(): boolean {
    return this.ended === null;
  }

  /** Sends `message` and waits for the runner's answer to it (prepared, prepare-failed or result); rejects if the runner dies first. */
  ask(message: ToRunner): Promise<FromRunner> {
    if (!this.alive) return Promise.reject(new RunnerEnded(this.ended!));
    return new Promise((resolve, reject) => {
      this.#waiter = { resolve, reject };
      this.send(message);
    });
  }

  send(message: ToRunner): void {
    if (this.alive && this.child.connected) this.child.send(message);
  }

  kill(): void {
    if (this.alive) this.child.kill('SIGKILL');
  }

  /** Ends it gently: it exits when its channel closes. */
  retire(): void {
    this.retiring = true;
    if (this.alive && this.child.connected) this.child.disconnect();
  }

  #receive(message: FromRunner): void {
    if (message.type === 'ready') {
      this.ready = true;
      this.onReady(this);
    } else if (message.type === 'log') this.hooks?.log(message.text);
    else if (message.type === 'call') this.hooks?.call(message);
    else if (message.type === 'compile') {
      this.compile(message.file, message.source).then(
        (value) => this.send({ type: 'reply', id: message.id, value }),
        (error: unknown) => this.send({ type: 'reply', id: message.id, error: toWireError(error) }),
      );
    } else {
      const waiter = this.#waiter;
      this.#waiter = null;
      waiter?.resolve(message);
    }
  }

  #describeExit(code: number | null, signal: NodeJS.Signals | null, maxMemoryMb: number): string {
    if (/heap out of memory|Allocation failed/i.test(this.#stderrTail))
      return `it ran out of memory (a runner's heap is limited to ${maxMemoryMb} MB: --runner-max-memory)`;
    if (signal === 'SIGKILL') return 'it was killed (SIGKILL)';
    if (signal !== null) return `it was ended by ${signal}${signal === 'SIGSEGV' || signal === 'SIGBUS' || signal === 'SIGABRT' ? ' (a native crash)' : ''}`;
    const uncaught = /\n\s*(?:Uncaught )?([A-Za-z]*Error: [^\n]*)/.exec(this.#stderrTail);
    if (uncaught) return `it exited with code ${code} after an uncaught exception (${uncaught[1]!.slice(0, 300)})`;
    return `it exited with code ${code} (process.exit() in the task's code, or a crash)`;
  }
}

/**
 * Task code in a pool of child processes, off the worker's event loop (`--task-isolation
 * process`, the default). The worker keeps claiming, heartbeating and writing outcomes on its
 * own loop whatever a task does: a task that spins the CPU is killed at its execution timeout,
 * and one that exits, throws outside its promise chain, runs out of memory or crashes natively
 * fails only its own try. Runners are started as slots need them and kept for the next task,
 * up to `maxTasks` tasks or `maxMemoryMb` of resident memory each, then replaced.
 *
 * Why processes, not worker threads: a thread shares the process, so a native crash or an
 * abort() in an addon takes the worker down with it, and `process.exit()` semantics, signal
 * handlers and resident-memory limits are the process's. The cost, measured in the README, is
 * memory per runner and its start; both are paid once per `maxTasks` tasks.
 */
export class ProcessTaskRunner implements TaskRunner {
  readonly #idle: RunnerProcess[] = [];
  readonly #all = new Set<RunnerProcess>();
  /** Spawned, not ready yet. */
  readonly #starting = new Set<RunnerProcess>();
  /** What runners said of the tasks of each DAG file: most tasks start without asking one. */
  readonly #settings = new RunSettingsCache();
  /** Tasks waiting for a runner: started tasks' runs first, then tasks to prepare, oldest first. */
  readonly #waiters: { resolve(runner: RunnerProcess): void; reject(error: unknown): void; label: string; since: number }[] = [];
  /** How long a runner takes to start, smoothed over the starts seen (ms). */
  #startMs = FIRST_START_ESTIMATE_MS;
  /** Looks again once the oldest waiter has waited #startMs. */
  #startCheck: NodeJS.Timeout | undefined;
  readonly #entry = runnerEntry();
  /** The user files runners load, compiled here once for all of them. */
  readonly #compiled = new CompiledUserFiles();
  #closed = false;
  #retireTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly options: ProcessTaskRunnerOptions,
    /** The database services of each task's context, served from the worker's process. */
    private readonly services: (claimed: ClaimedTaskInstance, started: StartedTaskInstance) => TaskServices,
    private readonly log: Logger,
  ) {}

  /**
   * A task whose DAG file's settings the worker knows (RunSettingsCache) is ready at once: its
   * run is the one round trip to a runner. Otherwise a runner loads it first, and says the
   * settings of every task of its DAG.
   */
  async prepare(claimed: ClaimedTaskInstance): Promise<PreparedTask> {
    const known = await this.#settings.lookup(claimed);
    if (known) return this.#prepared(known, undefined);
    const label = `${claimed.dagId}.${claimed.taskId} (task instance ${claimed.id})`;
    const runner = await this.#acquire(label);
    let answer: FromRunner;
    try {
      answer = await runner.ask({ type: 'prepare', claimed });
    } catch (crash) {
      throw new TaskCrashedError(`loading ${label}`, (crash as Error).message);
    }
    // The runner goes back to the pool now, while the worker records the start (with short tasks
    // that write is a third of a try: held through it, one runner served 8 slots one task after
    // another), and again as soon as the run has ended (the worker then records the outcome
    // without holding it).
    this.#offer(runner);
    if (answer.type === 'prepare-failed') throw fromWireError(answer.error);
    if (answer.type !== 'prepared') throw new TaskCrashedError(`loading ${label}`, `its runner answered ${answer.type} to prepare`);
    this.#settings.store(claimed, answer.file, answer.dagTasks);
    return this.#prepared(answer, runner);
  }

  /**
   * A task ready to run: its run takes `loadedBy` again if it is free (it has the task loaded),
   * else whichever runner is free first, which loads it. After an abort the worker moves on at
   * once, and the runner comes back once it has ended (or been killed).
   */
  #prepared(settings: RunSettings, loadedBy: RunnerProcess | undefined): PreparedTask {
    let running: Promise<unknown> = Promise.resolve();
    return {
      retry: settings.retry,
      executionTimeoutMs: settings.executionTimeoutMs,
      run: (taskLabel, claimed, started, tryLog, signal) => {
        const run = this.#acquire(taskLabel, { loadedBy, signal }).then(
          (runs) => {
            if (signal.aborted) {
              // Timed out or stopped while it waited for a runner: its code never starts.
              this.#offer(runs);
              return { kind: 'failed', error: signal.reason, retryable: true } satisfies TaskResult;
            }
            return this.#run(runs, taskLabel, claimed, started, tryLog, signal).finally(() => this.#offer(runs));
          },
          (error: unknown): TaskResult => ({ kind: 'failed', error, retryable: true }),
        );
        running = run;
        return run;
      },
      // The run ends (its result, or its runner's death: killed at the grace) within the grace.
      stopped: async () => void (await running),
    };
  }

  async #run(
    runner: RunnerProcess,
    label: string,
    claimed: ClaimedTaskInstance,
    started: StartedTaskInstance,
    tryLog: TryLoggers,
    signal: AbortSignal,
  ): Promise<TaskResult> {
    const services = this.services(claimed, started);
    runner.hooks = {
      log: (text) => tryLog.taskText(text),
      call: (call) => {
        const service = services[call.name] as (...args: unknown[]) => Promise<unknown>;
        Promise.resolve()
          .then(() => service(...call.args))
          .then(
            (value) => runner.send({ type: 'reply', id: call.id, value }),
            (error: unknown) => runner.send({ type: 'reply', id: call.id, error: toWireError(error) }),
          );
      },
    };
    let killTimer: NodeJS.Timeout | undefined;
    const onAbort = () => {
      // Asked to stop: its code sees context.signal aborted, and has the grace to end before
      // its runner is killed (code that never yields cannot be stopped any other way).
      runner.retiring = true;
      runner.send({ type: 'abort', reason: toWireError(signal.reason) });
      killTimer = setTimeout(() => runner.kill(), this.options.killGraceMs);
    };
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
    try {
      const answer = await runner.ask({
        type: 'run',
        label,
        claimed,
        started,
        log: { level: tryLog.task.level, bindings: tryLog.task.bindings() },
      });
      if (answer.type !== 'result') throw new RunnerEnded(`it answered ${answer.type} to run`);
      runner.tasksRun++;
      if (runner.tasksRun >= this.options.maxTasks || answer.rss > this.options.maxMemoryMb * 1024 * 1024) runner.retiring = true;
      const result = answer.result;
      return result.kind === 'failed' ? { kind: 'failed', error: fromWireError(result.error), retryable: result.retryable } : result;
    } catch (crash) {
      return { kind: 'failed', error: new TaskCrashedError(label, (crash as Error).message), retryable: true };
    } finally {
      clearTimeout(killTimer);
      signal.removeEventListener('abort', onAbort);
      runner.hooks = null;
    }
  }

  /**
   * Starts the runner kept idle (KEEP_IDLE), so the first task does not wait for a runner to
   * start (bench:runtime, when a start took half a second or more: 8.1 -> 7.5 s), and starts retiring idle
   * runners beyond it.
   */
  start(): void {
    if (this.#retireTimer !== undefined || this.#closed) return; // started already (prewarmed)
    for (let i = 0; i < KEEP_IDLE; i++) this.#spawn();
    this.#retireTimer = setInterval(() => this.#retireIdle(), IDLE_CHECK_MS);
    this.#retireTimer.unref();
  }

  /**
   * A ready runner for a task: an idle one, else the first to become free, a starting one or
   * one a finished task gives back (a burst of short tasks keeps the warm runners busy rather
   * than waiting for new processes to start). New runners start while slots are left.
   */
  #acquire(label: string, run?: { readonly loadedBy: RunnerProcess | undefined; readonly signal: AbortSignal }): Promise<RunnerProcess> {
    const signal = run?.signal;
    const idle = this.#takeIdle(run?.loadedBy) ?? this.#popIdle();
    if (idle) return Promise.resolve(idle);
    return new Promise((resolve, reject) => {
      const waiter = {
        resolve: (runner: RunnerProcess) => {
          signal?.removeEventListener('abort', giveUp);
          resolve(runner);
        },
        reject,
        label,
        since: performance.now(),
      };
      // A started task's run that times out or is stopped meanwhile stops waiting.
      const giveUp = () => {
        const at = this.#waiters.indexOf(waiter);
        if (at >= 0) this.#waiters.splice(at, 1);
        reject(signal!.reason);
      };
      signal?.addEventListener('abort', giveUp, { once: true });
      // A started task's run goes before the tasks still to be prepared: it is further along.
      if (run) this.#waiters.unshift(waiter);
      else this.#waiters.push(waiter);
      // Starting a runner costs CPU: a few at a time, so a burst of short tasks is served by the
      // warm runners meanwhile instead of starving them of CPU.
      this.#startForWaiters();
    });
  }

  /** `runner`, if it is idle and may take a task. */
  #takeIdle(runner: RunnerProcess | undefined): RunnerProcess | undefined {
    const at = runner === undefined ? -1 : this.#idle.indexOf(runner);
    if (at < 0 || !runner!.alive || runner!.retiring) return undefined;
    this.#idle.splice(at, 1);
    return runner;
  }

  #popIdle(): RunnerProcess | undefined {
    while (this.#idle.length > 0) {
      const idle = this.#idle.pop()!;
      if (idle.alive && !idle.retiring) return idle;
    }
    return undefined;
  }

  #spawn(): void {
    if (this.#closed || this.#all.size >= this.options.slots) return;
    const spawnedAt = performance.now();
    const runner = new RunnerProcess(
      this.#entry,
      this.options,
      this.log,
      (ready) => {
        this.#starting.delete(ready);
        this.#startMs = 0.7 * this.#startMs + 0.3 * (performance.now() - spawnedAt);
        this.#offer(ready);
      },
      (file, source) => this.#compiled.compile(file, source),
    );
    this.#all.add(runner);
    this.#starting.add(runner);
    void runner.exited.then(() => {
      this.#all.delete(runner);
      if (this.#starting.delete(runner) && this.#waiters.length > this.#starting.size) {
        // It died before it was ready (it cannot start: the memory limit, the entry): the task
        // waiting longest fails with why, rather than every slot waiting for ever.
        const waiter = this.#waiters.shift()!;
        waiter.reject(new TaskCrashedError(`loading ${waiter.label}`, `a runner process could not start: ${runner.ended}`));
        return;
      }
      // Room for one more: a task may be waiting for it (a retired or crashed runner's place).
      this.#startForWaiters();
      if (runner.ready) this.#keepWarm();
    });
  }

  /**
   * A runner retired (its task limit, its memory) or lost after it had started is replaced at
   * once while fewer than KEEP_IDLE would be left, rather than when the next task needs it: a
   * burst after a quiet spell (resumes after their triggers' wait) finds a runner ready instead
   * of waiting a second for one (bench:runtime: the 1,000th task retired the one runner, and
   * the resumes five seconds later waited for its replacement). One that never became ready is
   * not (it would fail again at once).
   */
  #keepWarm(): void {
    if (this.#closed) return;
    let live = 0;
    for (const runner of this.#all) if (!runner.retiring) live++;
    if (live < KEEP_IDLE) this.#spawn();
  }

  /**
   * Starts a runner if tasks wait for more than are starting (one at a time, see
   * MAX_STARTING), and either none runs at all or the task waiting longest has waited as long as
   * a runner takes to start: a burst of short tasks is served sooner by the warm runners, and
   * each runner started costs CPU that they would lose (bench:runtime: 1,000
   * deferring tasks on 8 slots start 8 runners otherwise). Long tasks keep their slots busy, so
   * tasks wait, and runners start up to one per slot.
   */
  #startForWaiters(): void {
    clearTimeout(this.#startCheck);
    this.#startCheck = undefined;
    if (this.#closed || this.#starting.size >= Math.min(this.#waiters.length, MAX_STARTING)) return;
    const waitedMs = performance.now() - Math.min(...this.#waiters.map((waiter) => waiter.since));
    if (this.#all.size === 0 || waitedMs >= this.#startMs) {
      this.#spawn();
      return;
    }
    this.#startCheck = setTimeout(() => this.#startForWaiters(), this.#startMs - waitedMs);
    this.#startCheck.unref();
  }

  /** A runner free for a task: to the task waiting longest, else idle. */
  #offer(runner: RunnerProcess): void {
    if (!runner.alive) return;
    if (runner.retiring || this.#closed) {
      runner.retire();
      // Its replacement, if a task waits for one, or to keep one warm.
      this.#startForWaiters();
      this.#keepWarm();
      return;
    }
    const waiter = this.#waiters.shift();
    if (waiter) {
      waiter.resolve(runner);
      this.#startForWaiters();
      return;
    }
    runner.idleSince = Date.now();
    this.#idle.push(runner);
  }

  /** Runners idle for IDLE_RETIRE_MS go, all but KEEP_IDLE: a burst's runners do not stay for ever. */
  #retireIdle(): void {
    const now = Date.now();
    // Oldest idle first (runners are taken from the end).
    while (this.#idle.length > KEEP_IDLE && now - this.#idle[0]!.idleSince >= IDLE_RETIRE_MS) this.#idle.shift()!.retire();
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#retireTimer);
    clearTimeout(this.#startCheck);
    for (const waiter of this.#waiters.splice(0)) waiter.reject(new TaskCrashedError(`loading ${waiter.label}`, 'the worker is stopping'));
    this.#idle.length = 0;
    const all = [...this.#all];
    for (const runner of all) runner.retire();
    // A runner still running a task (handed back at shutdown) is not waited for.
    const gone = Promise.all(all.map((runner) => runner.exited));
    const timer = setTimeout(() => {
      for (const runner of all) runner.kill();
    }, this.options.killGraceMs);
    await gone;
    clearTimeout(timer);
  }
}
