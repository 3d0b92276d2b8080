/**
 * Task runners: child processes or worker threads? Measures what each costs, the way the
 * worker uses them: start N runners at once, each loading deferflow's public API (what every
 * DAG file imports), then pass small messages to and fro (a task's prepare and run).
 *
 *   npm run bench:runners [-- --runners 4 --messages 2000]
 *
 * Prints one JSON line per kind: start_ms_p50/max (spawn until deferflow is loaded),
 * rss_per_runner_mb (a process's own resident memory; for threads, what the parent grew by per
 * thread), round_trip_us (one message and its answer, averaged).
 */
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { percentile } from './bench-support.ts';

const args = await yargs(hideBin(process.argv))
  .option('runners', { type: 'number', default: 4 })
  .option('messages', { type: 'number', default: 2000 })
  .strict()
  .parse();

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const index = pathToFileURL(path.join(root, 'dist/src/index.js')).href;
const scratch = mkdtempSync(path.join(os.tmpdir(), 'deferflow-runner-bench-'));

// The same body for both: load deferflow, say ready, answer each message with its resident size.
const body = (channel: string) => `
await import(${JSON.stringify(index)});
const send = (message) => ${channel}(message);
send({ type: 'ready', rss: process.memoryUsage.rss() });
`;
const processFile = path.join(scratch, 'process-runner.mjs');
writeFileSync(processFile, `${body('process.send')}process.on('message', (m) => process.send(m)); process.on('disconnect', () => process.exit(0));\n`);
const threadSource = `import { parentPort } from 'node:worker_threads';\n${body('parentPort.postMessage.bind(parentPort)')}parentPort.on('message', (m) => parentPort.postMessage(m));\n`;

interface Runner {
  send(message: unknown): void;
  next(): Promise<{ type: string; rss?: number }>;
  end(): Promise<void>;
}

function channel(on: (listener: (message: { type: string; rss?: number }) => void) => void) {
  const queue: { type: string; rss?: number }[] = [];
  let waiting: ((message: { type: string; rss?: number }) => void) | null = null;
  on((message) => {
    if (waiting) {
      const resolve = waiting;
      waiting = null;
      resolve(message);
    } else queue.push(message);
  });
  return () => (queue.length > 0 ? Promise.resolve(queue.shift()!) : new Promise<{ type: string; rss?: number }>((resolve) => (waiting = resolve)));
}

function processRunner(): Runner {
  const child = fork(processFile, [], { serialization: 'advanced', stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const next = channel((listener) => child.on('message', listener));
  return {
    send: (message) => child.send(message as object),
    next,
    end: () =>
      new Promise((resolve) => {
        child.once('exit', () => resolve());
        child.disconnect();
      }),
  };
}

function threadRunner(): Runner {
  const thread = new Worker(new URL(`data:text/javascript,${encodeURIComponent(threadSource)}`));
  const next = channel((listener) => thread.on('message', listener));
  return { send: (message) => thread.postMessage(message), next, end: async () => void (await thread.terminate()) };
}

async function measure(kind: 'process' | 'thread') {
  const rssBefore = process.memoryUsage.rss();
  const started = performance.now();
  const runners = Array.from({ length: args.runners }, () => (kind === 'process' ? processRunner() : threadRunner()));
  const ready = await Promise.all(runners.map(async (runner) => ({ message: await runner.next(), at: performance.now() - started })));
  const startMs = ready.map((entry) => entry.at).sort((a, b) => a - b);
  const rssPerRunner =
    kind === 'process' ? ready.reduce((sum, entry) => sum + entry.message.rss!, 0) / runners.length : (process.memoryUsage.rss() - rssBefore) / runners.length;
  const message = { type: 'run', claimed: { id: 1, dagId: 'd', taskId: 't', runId: 'r', fileloc: '/dags/d.mjs' }, started: { tryNumber: 1 } };
  const t0 = performance.now();
  await Promise.all(
    runners.map(async (runner) => {
      for (let i = 0; i < args.messages / runners.length; i++) {
        runner.send(message);
        await runner.next();
      }
    }),
  );
  const roundTripUs = ((performance.now() - t0) * 1000 * runners.length) / args.messages;
  await Promise.all(runners.map((runner) => runner.end()));
  return {
    kind,
    runners: args.runners,
    start_ms_p50: Math.round(percentile(startMs, 0.5)),
    start_ms_max: Math.round(startMs.at(-1)!),
    rss_per_runner_mb: Number((rssPerRunner / 1024 / 1024).toFixed(1)),
    round_trip_us: Math.round(roundTripUs),
  };
}

try {
  for (const kind of ['process', 'thread'] as const) console.log(JSON.stringify(await measure(kind)));
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
