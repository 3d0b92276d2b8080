// The README's worked example, run for real: examples/triggers/http-status-trigger.ts loaded the
// way --trigger-module loads it, and examples/operators/wait-for-report.ts deferring on it.
import { readdirSync, readFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { isTaskDeferred, resumeTaskInstance, TaskDeferred, type TaskContext } from '../../src/index.ts';
import { TRIGGER_FAILURE_METHOD } from '../../src/internals.ts';
import { openStores } from '../../src/storage/index.ts';
import { WaitForReport } from '../../examples/operators/wait-for-report.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { REPO_ROOT } from '../support/processes.ts';
import { createTaskInstance, migratedDatabase, taskInstance, waitFor, type TestDatabase } from '../support/fixtures.ts';
import { startTriggerer, type TestTriggerer } from '../support/in-process-triggerer.ts';

afterAll(dropTestDatabases);

const EXAMPLE_MODULE = 'examples/triggers/http-status-trigger.ts';

/** A local server answering 404 until `ready()` is called, then 200. */
async function reportServer() {
  let ready = false;
  let requests = 0;
  const server = http.createServer((_request, response) => {
    requests++;
    response.writeHead(ready ? 200 : 404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/daily`,
    ready: () => (ready = true),
    requests: () => requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const capture = (operator: WaitForReport): TaskDeferred => {
  try {
    operator.execute({} as TaskContext);
  } catch (thrown) {
    if (thrown instanceof TaskDeferred) return thrown;
    throw thrown;
  }
  throw new Error('expected WaitForReport to defer');
};

describe.each(testDialects)('README example on %s', (dialect) => {
  const open: { databases: TestDatabase[]; triggerers: TestTriggerer[]; servers: { close(): Promise<void> }[] } = {
    databases: [],
    triggerers: [],
    servers: [],
  };
  afterEach(async () => {
    await Promise.all(open.triggerers.splice(0).map((tr) => tr.stop()));
    await Promise.all(open.servers.splice(0).map((server) => server.close()));
    await Promise.all(open.databases.splice(0).map((db) => db.close()));
  });

  it('WaitForReport defers on HttpStatusTrigger and resumes in onReady once the URL answers 200', async () => {
    const db = await migratedDatabase(dialect);
    open.databases.push(db);
    const server = await reportServer();
    open.servers.push(server);
    const operator = new WaitForReport({ taskId: 'wait_for_report', reportUrl: server.url });
    const deferral = capture(operator);
    // Poll every 60 s as written in the example would make a slow test: same trigger, 50 ms.
    (deferral.serializedTrigger.kwargs as { pollSeconds: number }).pollSeconds = 0.05;
    const id = await createTaskInstance(db);
    await openStores(db).taskInstances.deferTaskInstance(id, deferral);
    const tr = await startTriggerer(db, { triggerModules: [EXAMPLE_MODULE] });
    open.triggerers.push(tr);

    await waitFor(() => server.requests() >= 3, { what: 'the trigger polling' });
    expect((await taskInstance(db, id)).state).toBe('deferred');
    server.ready();
    await waitFor(async () => (await taskInstance(db, id)).state === 'scheduled', { what: 'the event' });

    const context: TaskContext = { taskInstance: { id, dagId: 'test_dag', taskId: 'wait', runId: 'manual__1', mapIndex: -1, tryNumber: 1 } };
    const result = await resumeTaskInstance(db, id, operator, context);
    expect(result).toEqual({ taskInstance: id, report: server.url, requestedAt: deferral.kwargs.requestedAt });
  });

  it('a bad URL in a stored row fails only that task instance, naming the problem', async () => {
    const db = await migratedDatabase(dialect);
    open.databases.push(db);
    const server = await reportServer();
    open.servers.push(server);
    server.ready();
    const good = capture(new WaitForReport({ taskId: 'wait_for_report', reportUrl: server.url }));
    (good.serializedTrigger.kwargs as { pollSeconds: number }).pollSeconds = 0.05;
    const bad = capture(new WaitForReport({ taskId: 'wait_for_other', reportUrl: `${server.url}?other` }));
    (bad.serializedTrigger.kwargs as { url: string }).url = 'ftp://nowhere';
    const goodId = await createTaskInstance(db);
    const badId = await createTaskInstance(db);
    await openStores(db).taskInstances.deferTaskInstance(goodId, good);
    await openStores(db).taskInstances.deferTaskInstance(badId, bad);
    open.triggerers.push(await startTriggerer(db, { triggerModules: [EXAMPLE_MODULE] }));

    await waitFor(async () => (await taskInstance(db, badId)).state === 'scheduled' && (await taskInstance(db, goodId)).state === 'scheduled');
    const failed = await taskInstance(db, badId);
    expect(failed.next_method).toBe(TRIGGER_FAILURE_METHOD);
    expect(String(failed.next_kwargs!.error)).toContain('url must be an http(s) URL, got "ftp://nowhere"');
    expect((await taskInstance(db, goodId)).next_event).toEqual({ url: server.url, status: 200 });
  });
});

describe('the npm start demo DAG', () => {
  it('examples/dags loads cleanly (with the streaming and release examples): deferral_demo has 200 tasks that each defer 10 s on a TimeDeltaTrigger and resume at afterWait', async () => {
    const { loadDagFolder } = await import('../../src/authoring/dags/loader.ts');
    const loaded = await loadDagFolder('examples/dags');
    expect(loaded.errors).toEqual([]);
    expect(loaded.dags.map(({ dag }) => dag.dagId).sort()).toEqual(['deferral_demo', 'release_approval', 'streaming_demo']);
    const tasks = loaded.dags.find(({ dag }) => dag.dagId === 'deferral_demo')!.dag.tasks;
    expect(tasks).toHaveLength(200);
    const before = Date.now();
    let deferred: unknown;
    try {
      tasks[0]!.execute({} as never);
    } catch (thrown) {
      deferred = thrown;
    }
    // By brand: the DAG file loads deferflow as a user's would (the built package), these tests its sources.
    expect(isTaskDeferred(deferred)).toBe(true);
    const { trigger, method } = deferred as TaskDeferred;
    expect(method).toBe('afterWait');
    const moment = Date.parse(String(trigger.serialize().kwargs.moment));
    expect(moment - before).toBeGreaterThanOrEqual(10_000);
    expect(moment - before).toBeLessThan(11_000);
  });
});

describe('examples', () => {
  it('import deferflow by its package name, as a user project would, never its sources by path', () => {
    const files = readdirSync(path.join(REPO_ROOT, 'examples'), { recursive: true, encoding: 'utf8' }).filter((file) => /\.[cm]?[jt]s$/.test(file));
    expect(files.length).toBeGreaterThan(0);
    for (const file of files) {
      const text = readFileSync(path.join(REPO_ROOT, 'examples', file), 'utf8');
      // Their own files (../triggers/http-status-trigger.ts) are theirs to import by path.
      expect(text, file).not.toMatch(/from '(\.\.\/)+src\/|from '(\.\.\/){2,}triggers\//);
      expect(text, file).toMatch(/from 'deferflow(\/triggers)?'/);
    }
  });
});
