/**
 * `deferflow standalone` as users run it: one process, a DAG folder, --trigger-dag and
 * --exit-when-done, on SQLite and PostgreSQL. What it must show through a real process: a
 * deferring task resumed and its downstream run; a retry after its delay; an execution timeout
 * that lapses during a deferral; a task that starts from a trigger and is ended by it, with no
 * worker; the exit code and the progress and summary lines.
 */
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { promisify } from 'node:util';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { processScratch } from '../support/process-scratch.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { waitFor } from '../support/fixtures.ts';
import { DEFERFLOW_BIN, PACKAGE_ENTRY, PACKAGE_TRIGGERS, spawnDeferflow, stopCleanly } from '../support/processes.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

const INDEX = JSON.stringify(PACKAGE_ENTRY);
const TRIGGERS = JSON.stringify(PACKAGE_TRIGGERS);

// Tasks append "<task> <event> <epoch ms>" to events.log next to the DAG file.
const DAGS = `
import { appendFileSync, existsSync } from 'node:fs';
import { BaseOperator, Dag, FunctionOperator, TaskDeferred, type RuntimeContext } from ${INDEX};
import { TimeDeltaTrigger } from ${TRIGGERS};
const note = (task: string, what: string) => appendFileSync(import.meta.dirname + '/events.log', \`\${task} \${what} \${Date.now()}\\n\`);

class WaitOneSecond extends BaseOperator<RuntimeContext> {
  execute(): never {
    note(this.taskId, 'deferred');
    return this.defer({ trigger: new TimeDeltaTrigger({ delta: 1 }), method: 'resume', kwargs: { asked: 'politely' } });
  }
  resume(_context: RuntimeContext, event: unknown, kwargs: { asked: string }) {
    note(this.taskId, 'resumed');
    return { fired: typeof event === 'string', asked: kwargs.asked };
  }
}

export const happy = new Dag({ dagId: 'happy' });
const wait = new WaitOneSecond({ taskId: 'wait' });
const flaky = new FunctionOperator({
  taskId: 'flaky',
  retries: 1,
  retryDelay: 1,
  fn: (context) => {
    note('flaky', \`try\${context.taskInstance.tryNumber}\`);
    if (context.taskInstance.tryNumber === 1) throw new Error('first try fails');
    return 'second try';
  },
});
const report = new FunctionOperator({
  taskId: 'report',
  fn: async (context) => {
    context.log.info({ upstreams: 2 }, 'reporting on wait and flaky');
    return { wait: await context.xcomPull('wait'), flaky: await context.xcomPull('flaky') };
  },
});
// Starts from its trigger and is ended by it: no worker ever runs it.
const sleepOnly = new FunctionOperator({
  taskId: 'sleep_only',
  fn: () => { throw new Error('a worker ran a task that starts from a trigger'); },
  startTrigger: { trigger: new TimeDeltaTrigger({ delta: 1, endFromTrigger: true }), method: 'execute' },
});
happy.add(wait, flaky, report, sleepOnly);
wait.before(report);
flaky.before(report);

export const outOfTime = new Dag({ dagId: 'out_of_time' });
outOfTime.add(
  new FunctionOperator({
    taskId: 'too_slow',
    executionTimeout: 1.5,
    fn: () => {
      note('too_slow', 'deferred');
      throw new TaskDeferred({ trigger: new TimeDeltaTrigger({ delta: 60 }), method: 'resume' });
    },
    resume: () => 'must never resume normally',
  }),
);

// Runs until a file named "release" appears beside the DAG file.
export const interrupted = new Dag({ dagId: 'interrupted' }).add(
  new FunctionOperator({
    taskId: 'until_released',
    fn: async (context) => {
      note('until_released', \`try\${context.taskInstance.tryNumber}\`);
      while (!existsSync(import.meta.dirname + '/release')) await new Promise((resolve) => setTimeout(resolve, 50));
      return 'released';
    },
  }),
);
`;

describe.each(testDialects)('deferflow standalone on %s', (dialect) => {
  async function setUp() {
    const db = await scratch.database(dialect);
    const dags = scratch.dir('standalone');
    writeFileSync(path.join(dags, 'dags.mts'), DAGS);
    const events = () =>
      readFileSync(path.join(dags, 'events.log'), 'utf8')
        .trim()
        .split('\n')
        .map((line) => line.split(' '))
        .map(([task, what, at]) => ({ task: task!, what: what!, at: Number(at) }));
    const standalone = (dagId: string) =>
      spawnDeferflow(['standalone', '--db', db.url, '--dags', dags, '--concurrency', '2', '--trigger-dag', dagId, '--exit-when-done', '--log-level', 'info']);
    const taskInstances = async () =>
      Object.fromEntries(
        (
          await db.db.selectFrom('task_instance').select(['task_id', 'state', 'try_number', 'return_value', 'hostname', 'end_date', 'start_date']).execute()
        ).map((row) => [row.task_id, row]),
      );
    return { db, dags, standalone, events, taskInstances };
  }

  it('runs a DAG to success: deferral resumed, retry after its delay, downstream reads return values, a trigger ends a task with no worker; exit 0', async () => {
    const { db, standalone, events, taskInstances } = await setUp();
    const proc = standalone('happy');
    expect(await proc.exitWithin(40_000)).toEqual({ code: 0, signal: null });

    expect(proc.text[0]).toMatch(/^deferflow standalone: database .* DAGs from .*, 2 worker slot\(s\)/);
    expect(proc.text.find((line) => line.startsWith('triggered happy run manual__'))).toBeDefined();
    expect(proc.text.filter((line) => / done \d+\/4 /.test(line)).length).toBeGreaterThanOrEqual(2);
    expect(proc.text.find((line) => line.includes('done 4/4'))).toBeDefined();
    expect(proc.text.at(-1)).toMatch(/^happy manual__\S+: success in [\d.]+ s\. 4 tasks took [\d.]+ s in all/);

    const tis = await taskInstances();
    expect(Object.fromEntries(Object.entries(tis).map(([id, ti]) => [id, ti.state]))).toEqual({
      wait: 'success',
      flaky: 'success',
      report: 'success',
      sleep_only: 'success',
    });
    expect(JSON.parse(tis.report!.return_value!)).toEqual({ wait: { fired: true, asked: 'politely' }, flaky: 'second try' });
    expect(tis.flaky!.try_number).toBe(2);

    const log = events();
    const at = (task: string, what: string) => log.find((event) => event.task === task && event.what === what)!.at;
    expect(at('wait', 'resumed') - at('wait', 'deferred')).toBeGreaterThanOrEqual(1000);
    // The retry waited out its delay (1 s) after the failed try.
    expect(at('flaky', 'try2') - at('flaky', 'try1')).toBeGreaterThanOrEqual(1000);
    // Started from its trigger, ended by it: no worker picked it up, and it lasted the trigger's second.
    expect(log.filter((event) => event.task === 'sleep_only')).toEqual([]);
    expect(tis.sleep_only).toMatchObject({ try_number: 1, hostname: null, return_value: expect.stringMatching(/^"\d{4}-/) });
    expect(new Date(tis.sleep_only!.end_date!).getTime() - new Date(tis.sleep_only!.start_date!).getTime()).toBeGreaterThanOrEqual(1000);
    const workerLines = proc.stderr.filter((line) => line.includes('sleep_only'));
    expect(workerLines.filter((line) => line.includes('"component":"worker"'))).toEqual([]);

    // Task logs: what the task logged and what the worker said about it, per try.
    const runId = proc.text
      .find((line) => line.startsWith('triggered happy run '))!
      .split(' ')
      .at(-1)!;
    const logs = async (...more: string[]) => {
      const cli = spawnDeferflow(['tasks', 'logs', '--db', db.url, '--run', runId, ...more]);
      return { exit: (await cli.exitWithin(40_000)) as { code: number | null; signal: string | null }, out: cli.text, err: cli.stderr.join('\n') };
    };
    const reportLog = await logs('--task', 'report');
    expect(reportLog.exit).toEqual({ code: 0, signal: null });
    expect(reportLog.out.some((line) => / INFO {2}reporting on wait and flaky \{"upstreams":2\}$/.test(line))).toBe(true);
    expect(reportLog.out.at(-1)).toMatch(/ INFO {2}happy\.report \(run .*\) success/);
    const firstTry = await logs('--task', 'flaky', '--try', '1');
    expect(firstTry.out.find((line) => line.includes(' ERROR '))).toMatch(/\) up_for_retry: Error: first try fails/);
    expect(firstTry.out.some((line) => /^\s+at /.test(line))).toBe(true);
    expect((await logs('--task', 'flaky')).out.at(-1)).toMatch(/ INFO {2}happy\.flaky .* success/);
    // Started and ended by its trigger: said so, not "has no log".
    const neverRan = await logs('--task', 'sleep_only');
    expect(neverRan.exit.code).toBe(2);
    expect(neverRan.err).toContain('never ran on a worker: it was started and ended by its trigger (state success), so it has no task log');
    const noSuchTry = await logs('--task', 'flaky', '--try', '3');
    expect(noSuchTry.exit.code).toBe(2);
    expect(noSuchTry.err).toContain('try: task flaky of run');
    expect(noSuchTry.err).toContain('has tries 1 to 2, not 3');
  }, 60_000);

  it('an execution timeout lapses during a deferral: the task fails at its deadline, not when the trigger would fire; exit 1', async () => {
    const { standalone, events, taskInstances } = await setUp();
    const proc = standalone('out_of_time');
    expect(await proc.exitWithin(40_000)).toEqual({ code: 1, signal: null });
    expect(proc.text.at(-1)).toMatch(/^out_of_time manual__\S+: failed in [\d.]+ s\. 1 task took [\d.]+ s in all/);

    const ti = (await taskInstances()).too_slow!;
    expect(ti.state).toBe('failed');
    const failedAfterMs = new Date(ti.end_date!).getTime() - events().find((event) => event.what === 'deferred')!.at;
    expect(failedAfterMs).toBeGreaterThanOrEqual(1000);
    expect(failedAfterMs).toBeLessThan(15_000);
    expect(proc.stderr.some((line) => line.includes('DF_TASK_EXECUTION_TIMEOUT') || line.includes('execution timeout'))).toBe(true);
  }, 60_000);

  it('without --trigger-dag runs until SIGTERM, running what the CLI triggers meanwhile; stops with exit 0 and its job rows ended', async () => {
    const { db, dags } = await setUp();
    const proc = spawnDeferflow(['standalone', '--db', db.url, '--dags', dags, '--concurrency', '2', '--log-level', 'info']);
    await waitFor(async () => (await db.db.selectFrom('job').select('id').where('state', '=', 'running').execute()).length === 3, {
      what: 'three running job rows',
      timeoutMs: 20_000,
    });
    expect(await spawnDeferflow(['dags', 'trigger', 'out_of_time', '--db', db.url, '--run-id', 'r1']).exitWithin(40_000)).toEqual({ code: 0, signal: null });
    await waitFor(async () => (await db.db.selectFrom('dag_run').select('state').where('run_id', '=', 'r1').executeTakeFirstOrThrow()).state === 'failed', {
      what: 'the run to end',
      timeoutMs: 20_000,
    });
    await stopCleanly([proc]);
    const jobs = await db.db.selectFrom('job').select(['job_type', 'state']).orderBy('job_type').execute();
    expect(jobs).toEqual([
      { job_type: 'SchedulerJob', state: 'success' },
      { job_type: 'TriggererJob', state: 'success' },
      { job_type: 'WorkerJob', state: 'success' },
    ]);
  }, 60_000);

  it('Ctrl-C during a run says what it stops, hands the running try back at once, exits 130; the next start finishes the run on the same try', async () => {
    const { db, dags, standalone, taskInstances } = await setUp();
    const proc = standalone('interrupted');
    await waitFor(async () => (await taskInstances()).until_released?.state === 'running', { what: 'the task running', timeoutMs: 20_000 });
    proc.kill('SIGINT');
    expect(await proc.exitWithin(15_000)).toEqual({ code: 130, signal: null });
    expect(proc.text).toContain(
      'SIGINT: stopping; 1 running task instance(s) are handed back with their try (they run again on the next start); send it again to exit at once',
    );
    expect(proc.text.at(-1)).toMatch(
      /^run manual__\S+ of interrupted did not finish \(running, 0\/1 task\(s\) done\); it carries on when deferflow runs again/,
    );
    // Handed back, not left running for the zombie reaper: no try spent, ready for the next worker.
    expect((await taskInstances()).until_released).toMatchObject({ state: 'scheduled', try_number: 0 });
    expect((await db.db.selectFrom('job').select('state').execute()).map((job) => job.state)).toEqual(['success', 'success', 'success']);

    writeFileSync(path.join(dags, 'release'), '');
    const again = spawnDeferflow(['standalone', '--db', db.url, '--dags', dags, '--log-level', 'info']);
    await waitFor(
      async () => (await db.db.selectFrom('dag_run').select('state').where('dag_id', '=', 'interrupted').executeTakeFirstOrThrow()).state === 'success',
      {
        what: 'the run finished by the next start',
        timeoutMs: 20_000,
      },
    );
    expect((await taskInstances()).until_released).toMatchObject({ state: 'success', try_number: 1, return_value: '"released"' });
    await stopCleanly([again]);
  }, 60_000);

  it('refuses --exit-when-done without --trigger-dag, and an unknown DAG, naming the option', async () => {
    const { db, standalone } = await setUp();
    const lonely = spawnDeferflow(['standalone', '--db', db.url, '--exit-when-done']);
    expect(await lonely.exitWithin(40_000)).toEqual({ code: 2, signal: null });
    expect(lonely.stderr.join('\n')).toContain('exit-when-done: needs trigger-dag');

    const unknown = standalone('no_such_dag');
    expect(await unknown.exitWithin(40_000)).toEqual({ code: 2, signal: null });
    expect(unknown.stderr.join('\n')).toContain('dag-id: no DAG "no_such_dag" among the serialized DAGs');
    // It stopped what it had started: no job row is left looking alive.
    expect(await db.db.selectFrom('job').select('state').where('state', '=', 'running').execute()).toEqual([]);
  }, 30_000);
});

/** What a terminal shows of `output`: carriage returns and erase-to-end-of-line applied, colours dropped. */
function screenOf(output: string): string[] {
  const lines: string[] = [''];
  let column = 0;
  // biome-ignore lint/suspicious/noControlCharactersInRegex: terminal escapes are what is parsed here
  for (const [token] of output.replace(/\x1b\[[0-9;]*m/g, '').matchAll(/\x1b\[K|\r\n|\r|\n|[^\r\n\x1b]+/g)) {
    const at = lines.length - 1;
    if (token === '\r') column = 0;
    else if (token === '\n' || token === '\r\n') {
      lines.push('');
      column = 0;
    } else if (token === '\x1b[K') lines[at] = lines[at]!.slice(0, column);
    else {
      lines[at] = lines[at]!.slice(0, column) + token + lines[at]!.slice(column + token.length);
      column += token.length;
    }
  }
  return lines;
}

describe('deferflow standalone on a terminal', () => {
  it('pretty-prints its log lines above the progress line, which stays the last line; JSON lines when not on a terminal', async () => {
    const db = await scratch.database('sqlite');
    const dags = scratch.dir('standalone-tty');
    writeFileSync(path.join(dags, 'dags.mts'), DAGS);
    const args = ['standalone', '--db', db.url, '--dags', dags, '--concurrency', '2', '--trigger-dag', 'happy', '--exit-when-done', '--log-level', 'info'];
    const quoted = [process.execPath, DEFERFLOW_BIN, ...args].map((arg) => `'${arg.replaceAll("'", "'\\''")}'`).join(' ');
    // util-linux's script runs the command on a pseudo-terminal, as a person's shell would.
    const { stdout } = await promisify(execFile)('script', ['-qefc', quoted, '/dev/null'], {
      encoding: 'utf8',
      timeout: 60_000,
      env: { ...process.env, NO_COLOR: '' },
    });
    const screen = screenOf(stdout).filter((line) => line.trim() !== '');
    expect(
      screen.filter((line) => line.includes('{"level"')),
      'raw JSON log lines',
    ).toEqual([]);
    // The task's own log line, pretty: its time, level and message.
    expect(screen.some((line) => /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO \(standalone\/\d+\): .*reporting on wait and flaky/.test(line))).toBe(true);
    // The progress line never shares a line with anything else, and is drawn last, before the summary.
    const progress = screen.filter((line) => line.includes('] done '));
    expect(progress.length).toBeGreaterThan(0);
    for (const line of progress) expect(line).toMatch(/^\[[#.]{20}\] done \d+\/4( \(\d+ failed\))? · deferred \d+ · running \d+ · waiting \d+ · [\d.]+ s$/);
    const summary = screen.findIndex((line) => /^happy manual__\S+: success in /.test(line));
    expect(summary).toBeGreaterThan(0);
    expect(screen[summary - 1]).toMatch(/^\[#{20}\] done 4\/4 · /);
    // The lines logged while the run went on are above it, one a line (the stop's come after the summary).
    expect(screen.slice(0, summary - 1).filter((line) => / INFO \(standalone\/\d+\): /.test(line)).length).toBeGreaterThan(3);

    // Not on a terminal: JSON lines on stderr, as before.
    const piped = spawnDeferflow(['standalone', '--db', db.url, '--dags', dags, '--trigger-dag', 'happy', '--exit-when-done', '--log-level', 'info']);
    expect((await piped.exit).code).toBe(0);
    expect(piped.stderr.length).toBeGreaterThan(0);
    for (const line of piped.stderr) expect(() => JSON.parse(line), line).not.toThrow();
  }, 90_000);
});
