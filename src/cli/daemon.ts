import type { Logger } from 'pino';
import type { Deferflow } from '../app/deferflow.ts';
import { describeThrown } from '../vocabulary/errors.ts';

/**
 * How every long-running deferflow process (triggerer, worker, scheduler, standalone) lives and
 * stops: it starts, runs until SIGTERM or SIGINT (handled from before the start), then stops
 * gracefully (the app stops, then the database closes, exit 0); a second signal, or a stop
 * slower than `deadlineMs`, exits at once with code 1. A throw escaping user code (a trigger's
 * or task's callback) is logged, and the process goes on.
 *
 * Hooks: `afterStart` runs once the app runs (a start that throws stops the app, and the error
 * propagates); `untilDone` (standalone's --exit-when-done) also stops the process when it
 * resolves, with the exit code it resolved to; `onSignal` hears the first signal before the stop
 * begins (to say what the stop waits for); `exitCodeAfterSignal`, called once stopped with the
 * database still open, picks the exit code of a stop by signal (default 0).
 */
export async function runUntilSignalled(
  log: Logger,
  app: Deferflow,
  deadlineMs: number,
  hooks: {
    afterStart?: () => Promise<void>;
    untilDone?: () => Promise<number>;
    onSignal?: (signal: NodeJS.Signals) => void;
    exitCodeAfterSignal?: (signal: NodeJS.Signals) => Promise<number>;
  } = {},
): Promise<never> {
  const database = app.database;
  const daemon = { ...hooks, stop: () => app.stop({ keepDatabaseOpen: true }) };
  process.on('uncaughtException', (error) =>
    log.error({ code: 'DF_UNCAUGHT', ...describeThrown(error) }, 'uncaught exception (user code threw outside a task or trigger); continuing'),
  );
  process.on('unhandledRejection', (reason) => log.error({ code: 'DF_UNCAUGHT', ...describeThrown(reason) }, 'unhandled rejection; continuing'));
  let signals = 0;
  let stopping = false;
  const stopAndExit = (exitCode: number, signal: NodeJS.Signals | null = null) => {
    if (stopping) return;
    stopping = true;
    setTimeout(() => {
      log.error('graceful stop took too long; exiting');
      process.exit(1);
    }, deadlineMs).unref();
    void daemon.stop().then(async () => {
      const code = signal !== null && daemon.exitCodeAfterSignal ? await daemon.exitCodeAfterSignal(signal).catch(() => 1) : exitCode;
      await database.close();
      process.exit(code);
    });
  };
  const onSignal = (signal: NodeJS.Signals) => {
    signals++;
    if (signals > 1) {
      log.warn({ signal }, `second ${signal}: exiting at once`);
      process.exit(1);
    }
    log.info({ signal }, `received ${signal}; stopping gracefully (send it again to exit at once)`);
    if (!stopping) daemon.onSignal?.(signal);
    stopAndExit(0, signal);
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  try {
    await app.start();
    await hooks.afterStart?.();
  } catch (error) {
    // Leave no job row looking alive behind the error.
    await app.stop();
    throw error;
  }
  if (daemon.untilDone) void daemon.untilDone().then(stopAndExit);
  // The process now lives on its timers until a signal stops it.
  return new Promise<never>(() => {});
}
