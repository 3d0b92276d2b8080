import os from 'node:os';
import type { Argv } from 'yargs';
import { declareOptions, rawOptionsFrom, refusalsByFlag } from './declare-options.ts';
import { SCHEDULER_OPTIONS } from '../daemons/scheduler/options.ts';
import { TRIGGERER_OPTIONS } from '../daemons/triggerer/options.ts';
import { WORKER_OPTIONS } from '../daemons/worker/options.ts';
import type { Stores } from '../storage/index.ts';
import { redactDatabaseUrl } from '../database/database-url.ts';
import { InvalidOptionError } from '../vocabulary/errors.ts';
import { STANDALONE_OPTIONS, resolveStandaloneOptions, type StandaloneOptions } from '../app/standalone/options.ts';
import { progressFigures, progressLine, summaryLine } from '../app/standalone/progress-line.ts';
import { deferflowOptionsOf } from '../app/config.ts';
import type { Deferflow } from '../app/deferflow.ts';
import { runUntilSignalled } from './daemon.ts';
import { ProgressScreen } from '../app/standalone/progress-screen.ts';
import { COMMON_OPTIONS } from '../daemons/common-options.ts';

const PROGRESS_INTERVAL_MS = 200;
/** Without a terminal, a progress line is printed when the figures change, at most this often. */
const PLAIN_PROGRESS_INTERVAL_MS = 1_000;

/** `deferflow standalone`: scheduler, worker and triggerer in one process. */
export function registerStandaloneCommand(cli: Argv): void {
  cli.command(
    'standalone',
    'Run scheduler, worker and triggerer in one process (the database is migrated first); optionally run one DAG and show its progress',
    (command) => declareOptions(command, STANDALONE_OPTIONS),
    async (args) => {
      // Each component's other options come from its environment variables: a refusal names their flags too.
      const options = refusalsByFlag([STANDALONE_OPTIONS, WORKER_OPTIONS, SCHEDULER_OPTIONS, TRIGGERER_OPTIONS], () =>
        resolveStandaloneOptions(rawOptionsFrom(STANDALONE_OPTIONS, args)),
      );
      if (options.exitWhenDone && options.triggerDag === null) {
        throw new InvalidOptionError('exit-when-done', 'needs trigger-dag: without a run to wait for, standalone runs until stopped');
      }
      // The package entry, not app/deferflow.ts: loading it hands it (and the built-in triggers) to
      // the user code this process loads, so a DAG file's `deferflow` is this very module.
      const [{ Deferflow }, { createLogger }, { openStores }, { statusPages }, { triggerDagRun }] = await Promise.all([
        import('../index.ts'),
        import('../vocabulary/logging.ts'),
        import('../storage/index.ts'),
        import('../app/web/status-pages.ts'),
        import('../services/dags/manual-run.ts'),
      ]);
      // On a terminal (stdout and stderr both), log lines are pretty unless a format was asked
      // for, and go above the progress line, which stays last; elsewhere JSON, on stderr.
      const screen = process.stdout.isTTY && process.stderr.isTTY ? new ProgressScreen() : null;
      const formatAsked = args['log-format'] !== undefined || (process.env[COMMON_OPTIONS.logFormat.env] ?? '') !== '';
      const log = screen
        ? createLogger({
            level: options.logLevel,
            format: formatAsked ? options.logFormat : 'pretty',
            name: 'standalone',
            write: (line) => screen.above(line, 'err'),
          })
        : createLogger({ level: options.logLevel, format: options.logFormat, name: 'standalone', stderr: true });
      const app = await Deferflow.open(
        deferflowOptionsOf({ worker: options.worker, scheduler: options.scheduler, triggerer: options.triggerer }, true, options.http),
        log,
      );
      const database = app.database;
      const storage = openStores(database);
      if (options.web) {
        app.extraRoutes = statusPages(database, {
          ...options.web,
          liveness: { triggererMs: options.triggerer.healthCheckThresholdMs, workerMs: options.scheduler.zombieThresholdMs },
          // A response resumes its task on this process's worker: at once, not at its next poll.
          onResponded: () => app.worker?.wake(),
        });
      }
      const say = (line: string) => (screen ? screen.above(line) : process.stdout.write(`${line}\n`));
      say(
        `deferflow standalone: database ${redactDatabaseUrl(options.worker.databaseUrl)} (${app.appliedMigrations.length === 0 ? 'up to date' : `${app.appliedMigrations.length} migration(s) applied`}), ` +
          `DAGs from ${options.worker.dagsFolder}, ${options.worker.concurrency} worker slot(s), triggerer capacity ${options.triggerer.capacity}`,
      );
      let runId: string | null = null;
      const progress = { interrupted: false };
      await runUntilSignalled(log, app, options.worker.shutdownGraceMs + 5_000, {
        afterStart: async () => {
          if (app.httpAddress) say(`status page: http://${app.httpAddress.address}:${app.httpAddress.port}/`);
          if (options.triggerDag === null) return;
          runId = await triggerDagRun(database, options.triggerDag);
          say(`triggered ${options.triggerDag} run ${runId}`);
        },
        onSignal: (signal) => {
          progress.interrupted = true;
          const running = app.worker!.runningCount;
          const grace = options.worker.shutdownGraceMs;
          say(
            `\n${signal}: stopping` +
              (running === 0
                ? ''
                : `; ${running} running task instance(s) ${grace > 0 ? `get up to ${grace / 1000} s to finish, then ` : ''}are handed back with their try (they run again on the next start)`) +
              '; send it again to exit at once',
          );
        },
        exitCodeAfterSignal: async (signal) => {
          if (runId === null) return 0;
          const run = await storage.dagRuns.runProgress(options.triggerDag!, runId);
          if (run && (run.state === 'success' || run.state === 'failed')) return run.state === 'success' ? 0 : 1;
          const figures = run ? progressFigures(run) : null;
          say(
            `run ${runId} of ${options.triggerDag} did not finish (${run?.state ?? 'gone'}${figures ? `, ${figures.done}/${figures.total} task(s) done` : ''}); ` +
              'it carries on when deferflow runs again on this database',
          );
          return 128 + (os.constants.signals[signal] ?? 15);
        },
        untilDone:
          options.triggerDag === null
            ? undefined
            : async () => {
                const succeeded = await showRunProgress(storage, app, options, runId!, progress, screen);
                if (succeeded === null) return new Promise<number>(() => {});
                if (options.exitWhenDone) return succeeded ? 0 : 1;
                say('standalone keeps running (Ctrl-C to stop)');
                return new Promise<number>(() => {});
              },
      });
    },
  );
}

/**
 * Shows the run's progress until it finishes, then its summary; resolves to whether it
 * succeeded, or to null once interrupted (a signal: the stop says the rest).
 */
async function showRunProgress(
  storage: Stores,
  app: Deferflow,
  options: StandaloneOptions,
  runId: string,
  progressState: { interrupted: boolean },
  screen: ProgressScreen | null,
): Promise<boolean | null> {
  const dagId = options.triggerDag!;
  const startedAt = performance.now();
  let lastPrinted = '';
  let lastPrintedAt = 0;
  for (;;) {
    if (progressState.interrupted) return null;
    const progress = await storage.dagRuns.runProgress(dagId, runId);
    if (!progress) throw new InvalidOptionError('trigger-dag', `DAG run ${dagId} ${runId} disappeared while standalone watched it (deleted by someone else)`);
    const elapsed = performance.now() - startedAt;
    const figures = progressFigures(progress);
    const finished = progress.state === 'success' || progress.state === 'failed';
    const line = progressLine(figures, elapsed);
    // Read before the last progress line is drawn: nothing is printed between it and the summary.
    const taskMs = finished ? await storage.dagRuns.finishedTaskMs(dagId, runId) : 0;
    if (screen) {
      if (finished) screen.leave(line);
      else screen.draw(line);
    } else {
      const withoutTime = line.slice(0, line.lastIndexOf(' · '));
      if (finished || (withoutTime !== lastPrinted && elapsed - lastPrintedAt >= PLAIN_PROGRESS_INTERVAL_MS)) {
        process.stdout.write(`${line}\n`);
        lastPrinted = withoutTime;
        lastPrintedAt = elapsed;
      }
    }
    if (finished) {
      process.stdout.write(
        `${summaryLine({ dagId, runId, state: progress.state }, progress, taskMs, elapsed, options.worker.concurrency, app.worker!.slotMsSpent)}\n`,
      );
      return progress.state === 'success';
    }
    await new Promise((resolve) => setTimeout(resolve, PROGRESS_INTERVAL_MS));
  }
}
