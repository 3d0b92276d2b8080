/**
 * Durable task state as a user relies on it, with real processes on both dialects: the example
 * operator (examples/operators/run-external-job.ts) submits a job to an external service and
 * keeps its id with context.state; the `deferflow standalone` running it is SIGKILLed mid-try;
 * the retry, on a second standalone, finds the id and re-attaches instead of submitting again.
 * Task code runs in task runner processes (the default), so the state goes through the worker.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { writeFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { waitFor } from '../support/fixtures.ts';
import { PACKAGE_ENTRY, REPO_ROOT, RUNNER_PROCESSES, spawnDeferflow } from '../support/processes.ts';
import { processScratch } from '../support/process-scratch.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

/**
 * The external service: counts submissions; the first `accepted` request is left hanging (the
 * worker is killed while it waits), later ones answer at once; `done` answers 200 once `finish()`.
 */
async function externalService() {
  const submissions: string[] = [];
  let acceptedAsked = 0;
  let done = false;
  const server = http.createServer((request, response) => {
    const url = request.url ?? '';
    if (request.method === 'POST' && url === '/jobs') {
      const id = `job-${submissions.length + 1}`;
      submissions.push(id);
      response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id }));
    } else if (/^\/jobs\/[\w-]+\/accepted$/.test(url)) {
      if (++acceptedAsked > 1) response.writeHead(200).end();
    } else if (/^\/jobs\/[\w-]+\/done$/.test(url)) {
      response.writeHead(done ? 200 : 404).end();
    } else response.writeHead(400).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    submissions,
    acceptedAsked: () => acceptedAsked,
    finish: () => (done = true),
    close: () => new Promise<void>((resolve) => server.close(() => resolve())).finally(() => server.closeAllConnections()),
  };
}

describe.each(testDialects)('durable task state on %s', (dialect) => {
  it('a task that kept its external job id re-attaches to the job after its worker is SIGKILLed: one submission; tasks state shows it, tasks clear deletes it', async () => {
    const service = await externalService();
    try {
      const db = await scratch.database(dialect);
      const dags = scratch.dir('task-state');
      writeFileSync(
        path.join(dags, 'external_job.mts'),
        `import { Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
import { RunExternalJob } from ${JSON.stringify(path.join(REPO_ROOT, 'examples/operators/run-external-job.ts'))};
export const dag = new Dag({ dagId: 'external_job', defaultArgs: { retries: 1, retryDelay: 0.1 } });
dag.add(new RunExternalJob({ taskId: 'run_job', serviceUrl: ${JSON.stringify(service.url)} }));
`,
      );
      const standalone = (extra: string[]) =>
        spawnDeferflow(
          ['standalone', '--db', db.url, '--dags', dags, '--trigger-module', path.join(REPO_ROOT, 'examples/triggers/http-status-trigger.ts'), ...extra],
          RUNNER_PROCESSES,
        );
      const first = standalone(['--trigger-dag', 'external_job']);
      // Submitted, the id kept, and waiting for the service to accept it: killed there.
      await waitFor(() => service.acceptedAsked() === 1, { timeoutMs: 30_000, what: 'the first try waiting for the job to be accepted' });
      expect(service.submissions).toEqual(['job-1']);
      first.kill('SIGKILL');
      expect(await first.exitWithin()).toEqual({ code: null, signal: 'SIGKILL' });

      const second = standalone([]);
      try {
        const taskInstance = () => db.db.selectFrom('task_instance').select(['state', 'try_number', 'return_value']).executeTakeFirstOrThrow();
        await waitFor(async () => (await taskInstance()).state === 'deferred', { timeoutMs: 30_000, what: 'the retry deferred on the job' });
        expect((await taskInstance()).try_number).toBe(2);
        service.finish();
        await waitFor(async () => (await taskInstance()).state === 'success', { timeoutMs: 30_000, what: 'the task resumed when the job was done' });
        expect(JSON.parse((await taskInstance()).return_value!)).toEqual({ jobId: 'job-1', tries: 2 });
        // One job: the retry re-attached to it.
        expect(service.submissions).toEqual(['job-1']);
      } finally {
        second.kill('SIGTERM');
        await second.exitWithin();
      }

      const cli = async (args: string[]) => {
        const proc = spawnDeferflow([...args, '--db', db.url]);
        expect(await proc.exitWithin(), proc.text.join('\n')).toEqual({ code: 0, signal: null });
        return proc.text.join('\n');
      };
      const shown = await cli(['tasks', 'state', '--run', await runId(), '--task', 'run_job']);
      expect(shown).toMatch(/^1 key\(s\) of task run_job of run ".+"'s state, now success, try 2$/m);
      expect(shown).toMatch(/^job_id\s+"job-1"\s+1\s+\d{4}-/m);
      expect(JSON.parse(await cli(['tasks', 'state', '--run', await runId(), '--task', 'run_job', '--json']))).toEqual({ job_id: 'job-1' });
      // Kept through a clear that asks for it; gone after a plain one (a clear means "do it again").
      await cli(['tasks', 'clear', '--run', await runId(), '--keep-state']);
      expect(JSON.parse(await cli(['tasks', 'state', '--run', await runId(), '--task', 'run_job', '--json']))).toEqual({ job_id: 'job-1' });
      await cli(['tasks', 'clear', '--run', await runId()]);
      expect(JSON.parse(await cli(['tasks', 'state', '--run', await runId(), '--task', 'run_job', '--json']))).toEqual({});

      async function runId(): Promise<string> {
        return (await db.db.selectFrom('dag_run').select('run_id').executeTakeFirstOrThrow()).run_id;
      }
    } finally {
      await service.close();
    }
  }, 120_000);
});
