/**
 * Task runner processes: what one costs to start, in memory, and per task, as the worker uses
 * them. Forks N runners (the package's task-runner-main.js, with the environment the worker gives
 * it), waits for each to say it is ready, then has each prepare and run M times a task of a
 * TypeScript DAG file (as `deferflow init` writes them) that returns at once.
 *
 *   npm run bench:runners [-- --runners 4 --tasks 200]
 *
 * Side by side in one run: `authoring`, the runner as it is (deferflow's authoring API shared
 * with the DAG file, the rest loaded on first use), and `whole`, the runner sharing the whole
 * public entry (as before the authoring API; it loads kysely and the drivers), with a bare
 * `node` process's resident memory for reference. The runners are forked as the worker forks them:
 * with the worker's own Node flags (its default heap limit), not this script's (tsx's loader, which
 * a fork would otherwise inherit). One JSON line per mode:
 *   ready_ms_p50/max   fork → the runner's 'ready'
 *   ready_rss_mb       the runner's resident memory when it said it was ready (from /proc)
 *   first_run_ms_p50   the first task's prepare + run (it compiles the DAG file)
 *   rss_mb             the runner's resident memory after its first task (from its result)
 *   children_rss_mb    its child processes' resident memory then (an esbuild service, if it compiled itself)
 *   run_ms_p50/p99     one task's prepare + run, message to result (the slot time a warm runner adds)
 * and a last line with the ratios authoring / whole.
 */
import { execFileSync, fork, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { percentile } from './bench-support.ts';
import { WORKER_OPTIONS } from '../src/daemons/worker/options.ts';
import { CompiledUserFiles } from '../src/daemons/worker/compiled-user-files.ts';
import { toWireError } from '../src/daemons/worker/runner-protocol.ts';

const args = await yargs(hideBin(process.argv))
  .option('runners', { type: 'number', default: 4, describe: 'runner processes started at once, per mode' })
  .option('tasks', { type: 'number', default: 200, describe: 'tasks each runner prepares and runs' })
  .strict()
  .parse();

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const dist = (file: string) => pathToFileURL(path.join(root, 'dist', file)).href;
const runnerMain = path.join(root, 'dist/src/bundle/task-runner-main.js');
const scratch = mkdtempSync(path.join(os.tmpdir(), 'deferflow-runner-bench-'));
const dagFile = path.join(scratch, 'quick.ts');
writeFileSync(
  dagFile,
  `import { BaseOperator, Dag } from ${JSON.stringify(path.join(root, 'dist/src/index.js'))};
class Quick extends BaseOperator {
  async execute() {
    return 1;
  }
}
export const dag = new Dag({ dagId: 'quick' }).add(new Quick({ taskId: 'quick' }));
`,
);

type Mode = 'authoring' | 'whole';
const entries = (mode: Mode) => [
  { url: dist('src/index.js'), inTaskRunners: mode },
  { url: dist('src/internals.js'), inTaskRunners: 'on-use' },
  { url: dist('triggers/index.js'), inTaskRunners: 'whole' },
];

interface Message {
  readonly type: string;
  readonly id?: number;
  readonly file?: string;
  readonly source?: string;
  readonly rss?: number;
  readonly result?: { kind: string };
}

/** Serves its runners' compile requests, as their worker would (one per mode, like one worker). */
function start(mode: Mode, compiled: CompiledUserFiles): { child: ChildProcess; next(): Promise<Message> } {
  const child = fork(runnerMain, [], {
    execArgv: [`--max-old-space-size=${WORKER_OPTIONS.runnerMaxMemory.default}`],
    env: { ...process.env, DEFERFLOW_RUNNER_PRELOAD: JSON.stringify(entries(mode)), DEFERFLOW_RUNNER_SMART_SENSORS: 'null' },
    serialization: 'advanced',
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const queue: Message[] = [];
  let waiting: ((message: Message) => void) | null = null;
  child.on('message', (message: Message) => {
    if (message.type === 'log') return;
    if (message.type === 'compile') {
      compiled.compile(message.file!, message.source!).then(
        (value) => child.send({ type: 'reply', id: message.id, value }),
        (error: unknown) => child.send({ type: 'reply', id: message.id, error: toWireError(error) }),
      );
      return;
    }
    if (waiting) {
      const resolve = waiting;
      waiting = null;
      resolve(message);
    } else queue.push(message);
  });
  return { child, next: () => (queue.length > 0 ? Promise.resolve(queue.shift()!) : new Promise((resolve) => (waiting = resolve))) };
}

async function measure(mode: Mode) {
  const started = performance.now();
  const compiled = new CompiledUserFiles();
  const runners = Array.from({ length: args.runners }, () => start(mode, compiled));
  const readyRss: number[] = [];
  const readyMs = (
    await Promise.all(
      runners.map(async (runner) => {
        const message = await runner.next();
        if (message.type !== 'ready') throw new Error(`a runner said ${message.type} before ready`);
        const at = performance.now() - started;
        readyRss.push(residentBytes(runner.child.pid!));
        return at;
      }),
    )
  ).sort((a, b) => a - b);
  const runMs: number[] = [];
  const firstRunMs: number[] = [];
  const rss: number[] = [];
  const childrenRss: number[] = [];
  await Promise.all(
    runners.map(async (runner, r) => {
      for (let n = 0; n < args.tasks; n++) {
        const id = r * args.tasks + n + 1;
        const claimed = {
          id,
          dagId: 'quick',
          taskId: 'quick',
          runId: `run-${id}`,
          mapIndex: 0,
          operator: 'Quick',
          fileloc: dagFile,
          logicalDate: Date.now(),
          confJson: null,
          dataIntervalStart: null,
          dataIntervalEnd: null,
        };
        const t0 = performance.now();
        runner.child.send({ type: 'prepare', claimed });
        const prepared = await runner.next();
        if (prepared.type !== 'prepared') throw new Error(`prepare answered ${JSON.stringify(prepared)}`);
        runner.child.send({
          type: 'run',
          label: 'bench',
          claimed,
          started: { tryNumber: 1, nextMethod: null, nextKwargsJson: null, executionDeadline: null, startedAt: Date.now() },
          log: { level: 'warn', bindings: {} },
        });
        const result = await runner.next();
        if (result.type !== 'result' || result.result?.kind !== 'returned') throw new Error(`run answered ${JSON.stringify(result)}`);
        if (n === 0) {
          firstRunMs.push(performance.now() - t0);
          rss.push(result.rss!);
          childrenRss.push(childrenResidentBytes(runner.child.pid!));
        } else runMs.push(performance.now() - t0);
      }
    }),
  );
  for (const runner of runners) runner.child.disconnect();
  runMs.sort((a, b) => a - b);
  firstRunMs.sort((a, b) => a - b);
  return {
    mode,
    runners: args.runners,
    tasks_per_runner: args.tasks,
    ready_ms_p50: Math.round(percentile(readyMs, 0.5)),
    ready_ms_max: Math.round(readyMs.at(-1)!),
    ready_rss_mb: megabytes(mean(readyRss)),
    first_run_ms_p50: Math.round(percentile(firstRunMs, 0.5)),
    rss_mb: megabytes(mean(rss)),
    children_rss_mb: megabytes(mean(childrenRss)),
    run_ms_p50: Number(percentile(runMs, 0.5).toFixed(2)),
    run_ms_p99: Number(percentile(runMs, 0.99).toFixed(2)),
  };
}

/** A process's resident set size now, in bytes (what its result's `rss` reports for itself). */
function residentBytes(pid: number): number {
  return Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024;
}
function childrenResidentBytes(pid: number): number {
  const children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
  return children.reduce((sum, child) => sum + residentBytes(Number(child)), 0);
}
const mean = (values: readonly number[]) => values.reduce((sum, value) => sum + value, 0) / values.length;
const megabytes = (bytes: number) => Number((bytes / 1e6).toFixed(1));

try {
  const bareNodeMb = Number((Number(execFileSync(process.execPath, ['-e', 'process.stdout.write(String(process.memoryUsage.rss()))'])) / 1e6).toFixed(1));
  console.log(JSON.stringify({ bare_node_rss_mb: bareNodeMb, node: process.version, cpus: os.cpus().length }));
  const authoring = await measure('authoring');
  console.log(JSON.stringify(authoring));
  const whole = await measure('whole');
  console.log(JSON.stringify(whole));
  console.log(
    JSON.stringify({
      ratio_ready_p50: Number((authoring.ready_ms_p50 / whole.ready_ms_p50).toFixed(2)),
      ratio_rss: Number((authoring.rss_mb / whole.rss_mb).toFixed(2)),
      ratio_run_p50: Number((authoring.run_ms_p50 / whole.run_ms_p50).toFixed(2)),
    }),
  );
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
