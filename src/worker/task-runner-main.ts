/**
 * A task runner process (see process-task-runner.ts): the worker forks it, and it runs one task
 * at a time, as the worker tells it over the IPC channel. Nothing here touches the database:
 * what a task's context reads or writes is asked of the worker (a `call`), which holds the
 * connections. When the channel closes (the worker stopped or died) the runner exits.
 */
import pino from 'pino';
import type { Dag } from '../dags/dag.ts';
import { taskSettings } from '../dags/task-settings.ts';
import type { AnyOperator } from '../operators/base-operator.ts';
import type { SmartSensors } from '../sensors/base-sensor.ts';
import { loadClaimedTask, runtimeContext, TASK_SERVICE_NAMES, type TaskServices } from './dag-file-resolver.ts';
import { fromWireError, toWireError, type FromRunner, type ToRunner, type WireTaskResult } from './runner-protocol.ts';
import { runToResult } from './task-runner.ts';
import { registerTypeScriptHooks } from '../user-code/typescript-hooks.ts';

// Nothing to tell once the worker has let go (it stopped, or retired this runner while it was
// starting): the disconnect handler ends the process.
const send = (message: FromRunner) => {
  if (process.connected) process.send!(message);
};
const smartSensors = JSON.parse(process.env.DEFERFLOW_RUNNER_SMART_SENSORS ?? 'null') as SmartSensors | null;

let task: { dag: Dag; operator: AnyOperator } | null = null;
let running: AbortController | null = null;
const calls = new Map<number, { resolve(value: unknown): void; reject(error: Error): void }>();
let nextCall = 0;

/** The context's database services, answered by the worker. */
const services = Object.fromEntries(
  TASK_SERVICE_NAMES.map((name) => [
    name,
    (...args: unknown[]) =>
      new Promise((resolve, reject) => {
        const id = nextCall++;
        calls.set(id, { resolve, reject });
        send({ type: 'call', id, name, args });
      }),
  ]),
) as unknown as TaskServices;

async function handle(message: ToRunner): Promise<void> {
  switch (message.type) {
    case 'prepare': {
      try {
        task = await loadClaimedTask(message.claimed);
        const settings = taskSettings(task.dag, task.operator);
        send({ type: 'prepared', retry: settings.retry, executionTimeoutMs: settings.executionTimeoutMs });
      } catch (error) {
        task = null;
        send({ type: 'prepare-failed', error: toWireError(error) });
      }
      return;
    }
    case 'run': {
      const loaded = task!;
      const abort = new AbortController();
      running = abort;
      const taskLog = pino({ level: message.log.level, base: null }, { write: (text: string) => send({ type: 'log', text }) }).child(message.log.bindings);
      const result = await runToResult(
        message.label,
        loaded.operator,
        () => runtimeContext(loaded, message.claimed, message.started, taskLog, abort.signal, services, smartSensors ?? undefined),
        message.started,
      );
      running = null;
      const wire: WireTaskResult = result.kind === 'failed' ? { kind: 'failed', error: toWireError(result.error), retryable: result.retryable } : result;
      send({ type: 'result', result: wire, rss: process.memoryUsage.rss() });
      return;
    }
    case 'abort':
      running?.abort(fromWireError(message.reason));
      return;
    case 'reply': {
      const call = calls.get(message.id);
      calls.delete(message.id);
      if (message.error) call?.reject(fromWireError(message.error));
      else call?.resolve(message.value);
      return;
    }
  }
}

process.on('message', (message: ToRunner) => void handle(message));
process.on('disconnect', () => process.exit(0));

// What every DAG file needs (deferflow's public API, the TypeScript hooks) is loaded before the
// runner says it is ready: the worker hands it a task only then, and meanwhile gives that task
// to any runner that frees up first. deferflow first: once the hooks are registered, every module
// loaded goes through them (spawn to ready: about 460 ms with both at once, 430 ms so).
await import(new URL(import.meta.url.endsWith('.ts') ? '../index.ts' : '../index.js', import.meta.url).href).then(registerTypeScriptHooks).catch(() => {});
send({ type: 'ready' });
