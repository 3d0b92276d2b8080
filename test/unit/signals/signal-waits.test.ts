// Tasks and signals end to end (worker, scheduler and triggerer embedded, as a user runs them):
// waitForSignal with and without a match, a shared trigger row, a timeout, a signal sent before
// the wait, context.sendSignal from another DAG's task, and a send racing the defer call.
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import pino from 'pino';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { deferflow, type Deferflow, type JsonValue } from '../../../src/index.ts';
import { canonicalJson } from '../../../src/internals.ts';
import { dropTestDatabases, freshDatabaseUrl, testDialects, type TestDialect } from '../../support/databases.ts';
import { LogCapture, parsePlain, waitFor } from '../../support/fixtures.ts';
import { PACKAGE_ENTRY } from '../../support/processes.ts';
import { processScratch } from '../../support/process-scratch.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();
const entry = JSON.stringify(PACKAGE_ENTRY);

const OPERATORS = `import { BaseOperator } from ${entry};
export class WaitForSignal extends BaseOperator {
  constructor({ key, match, timeout, announce, ...options }) { super(options); Object.assign(this, { key, match, timeout, announce }); }
  async execute(context) {
    if (this.announce) {
      await context.sendSignal(this.announce, context.taskInstance.taskId);
      // 0 to 30 ms before the version is read: the racing send lands before it, or after.
      await new Promise((resolve) => setTimeout(resolve, Math.random() * 30));
    }
    return this.waitForSignal(context, this.key, { method: 'resume', match: this.match, timeout: this.timeout, kwargs: { note: 'kept' } });
  }
  resume(context, signal, kwargs) { return { ...signal, note: kwargs.note }; }
}
export class SendSignal extends BaseOperator {
  constructor({ key, value, ...options }) { super(options); Object.assign(this, { key, value }); }
  async execute(context) { return context.sendSignal(this.key, this.value); }
}
`;

describe.each(testDialects)('waiting for signals on %s', (dialect: TestDialect) => {
  let app: Deferflow | null = null;
  afterEach(async () => {
    await app?.stop();
    app = null;
  });

  async function start(name: string, dags: Record<string, string>): Promise<{ app: Deferflow; logs: LogCapture }> {
    const dir = scratch.dir(name);
    mkdirSync(path.join(dir, 'dags'));
    writeFileSync(path.join(dir, 'operators.mjs'), OPERATORS);
    for (const [dagId, body] of Object.entries(dags)) {
      writeFileSync(
        path.join(dir, 'dags', `${dagId}.mjs`),
        `import { Dag } from ${entry};\nimport { WaitForSignal, SendSignal } from '../operators.mjs';\nexport const dag = new Dag({ dagId: ${JSON.stringify(dagId)} }).add(${body});\n`,
      );
    }
    const logs = new LogCapture();
    app = await deferflow({
      databaseUrl: await freshDatabaseUrl(dialect),
      dagsFolder: path.join(dir, 'dags'),
      worker: { concurrency: 8, pollInterval: 0.1, shutdownGrace: 0, taskIsolation: 'none' },
      scheduler: { pollInterval: 0.1 },
      triggerer: { pollInterval: 0.1 },
      logger: pino({ level: 'info' }, logs),
    });
    return { app, logs };
  }

  const tis = async (running: Deferflow, dagId: string, runId: string) =>
    Object.fromEntries(
      (
        await running.database.db
          .selectFrom('task_instance')
          .select(['task_id', 'state', 'return_value'])
          .where('dag_id', '=', dagId)
          .where('run_id', '=', runId)
          .execute()
      ).map((row) => [row.task_id, { state: row.state, value: row.return_value === null ? null : JSON.parse(row.return_value) }]),
    );

  it('resumes waiting tasks with the first newer signal (matching, if asked), sharing one trigger per key and version; a signal sent before the wait never wakes it', async () => {
    const { app } = await start(`waits-${dialect}`, {
      listener: `
  new WaitForSignal({ taskId: 'matching', key: 'orders.ready', match: { status: 'ok' } }),
  ...['a', 'b', 'c'].map((id) => new WaitForSignal({ taskId: 'any_' + id, key: 'orders.ready' })),
  new WaitForSignal({ taskId: 'late', key: 'early.bird' }),
  new WaitForSignal({ taskId: 'never', key: 'never.sent', timeout: 2 })`,
      sender: `new SendSignal({ taskId: 'send', key: 'orders.ready', value: { status: 'ok', rows: 3 } })`,
    });
    expect(await app.sendSignal('early.bird', 'before the wait')).toBe(1);
    const runId = await app.triggerDagRun('listener');
    // These five by name: a count of five deferred could also be reached with one of them not yet
    // deferred and never (which times out after 2 s) deferred, and its trigger row would be missing.
    await waitFor(
      async () => {
        const now = await tis(app, 'listener', runId);
        return ['matching', 'any_a', 'any_b', 'any_c', 'late'].every((id) => now[id]?.state === 'deferred');
      },
      { what: 'the five tasks that wait past the timeout deferred' },
    );
    const rows = await app.database.db.selectFrom('trigger').select(['classpath', 'kwargs']).execute();
    expect(rows.every((row) => row.classpath === 'deferflow.triggers.SignalTrigger')).toBe(true);
    // (never.sent's row may already be gone: its task times out after 2 s.)
    const waits = rows.map((row) => canonicalJson(parsePlain(row.kwargs))).filter((kwargs) => !kwargs.includes('never.sent'));
    expect(waits.sort()).toEqual(
      (
        [
          { key: 'early.bird', sinceVersion: 1 },
          { key: 'orders.ready', sinceVersion: 0 },
          { key: 'orders.ready', sinceVersion: 0, match: { status: 'ok' } },
        ] as JsonValue[]
      )
        .map((kwargs) => canonicalJson(kwargs))
        .sort(),
    );
    // Not a match: the three plain waits resume with it, the matching one keeps waiting.
    expect(await app.sendSignal('orders.ready', { status: 'failed' })).toBe(1);
    await waitFor(
      async () => {
        const now = await tis(app, 'listener', runId);
        return ['any_a', 'any_b', 'any_c'].every((id) => now[id]!.state === 'success');
      },
      { what: 'the plain waits resumed' },
    );
    let states = await tis(app, 'listener', runId);
    for (const id of ['any_a', 'any_b', 'any_c']) {
      expect(states[id]).toEqual({
        state: 'success',
        value: { key: 'orders.ready', version: 1, value: { status: 'failed' }, sentAt: expect.any(String), note: 'kept' },
      });
    }
    expect(states.matching!.state).toBe('deferred');
    // A task of another DAG sends the matching one.
    const sender = await app.triggerDagRun('sender');
    expect(await app.waitForDagRun('sender', sender)).toBe('success');
    expect((await tis(app, 'sender', sender)).send!.value).toBe(2);
    // Each version says who sent it: the embedded API, then the task.
    const senders = await app.database.db.selectFrom('signal').select('sent_by').where('key', '=', 'orders.ready').orderBy('version').execute();
    expect(senders.map((row) => row.sent_by)).toEqual(['api', `task sender.send of run ${sender}`]);
    expect(await app.sendSignal('early.bird', 'after the wait')).toBe(2);
    expect(await app.waitForDagRun('listener', runId)).toBe('failed');
    states = await tis(app, 'listener', runId);
    expect(states.matching!.value).toMatchObject({ version: 2, value: { status: 'ok', rows: 3 } });
    expect(states.late!.value).toMatchObject({ key: 'early.bird', version: 2, value: 'after the wait' });
    // No signal within the timeout: the task fails cleanly, the others are unaffected.
    expect(states.never!.state).toBe('failed');
  }, 60_000);

  it(`never loses a signal sent while the task is deferring, nor wakes on one sent before (repeated ${dialect === 'postgres' ? 25 : 10} times)`, async () => {
    const rounds = dialect === 'postgres' ? 25 : 10;
    const { app } = await start(`race-${dialect}`, {
      racing: `...Array.from({ length: ${rounds} }, (_, i) => new WaitForSignal({ taskId: 'race_' + i, key: 'race.' + i, announce: 'race.ready' }))`,
    });
    const outcomes: string[] = [];
    // The moment a task announces it is about to wait, its key is sent: racing the version read and the defer.
    // Not awaited: each racing send goes out at once, not after the one before.
    const announced = await app.listenSignal('race.ready', (signal) => {
      void app!.sendSignal(`race.${String(signal.value).slice('race_'.length)}`, 'raced');
    });
    try {
      const runId = await app.triggerDagRun('racing');
      for (let i = 0; i < rounds; i++) {
        // Settled: resumed, or deferred with the trigger it waits on known.
        const settled = await waitFor(
          async () => {
            const row = await app!.database.db
              .selectFrom('task_instance')
              .leftJoin('trigger', 'trigger.id', 'task_instance.trigger_id')
              .select(['task_instance.state', 'task_instance.return_value', 'trigger.kwargs'])
              .where('task_instance.dag_id', '=', 'racing')
              .where('task_instance.task_id', '=', `race_${i}`)
              .executeTakeFirstOrThrow();
            if (row.state === 'success') return { resumedWith: JSON.parse(row.return_value!).version as number };
            if (row.state === 'deferred' && row.kwargs !== null) return { sinceVersion: parsePlain(row.kwargs).sinceVersion as number };
            return null;
          },
          { what: `race_${i} settled` },
        );
        if ('resumedWith' in settled) {
          // Deferred before the send: woken by it.
          expect(settled.resumedWith).toBe(1);
          outcomes.push('woken by the racing send');
        } else if (settled.sinceVersion === 0) {
          // Deferred before the send, not yet woken: it will be, by version 1.
          await waitFor(async () => (await tis(app!, 'racing', runId))[`race_${i}`]!.state === 'success', { what: `race_${i} woken` });
          expect((await tis(app, 'racing', runId))[`race_${i}`]!.value.version).toBe(1);
          outcomes.push('woken by the racing send');
        } else {
          // The send came first: it must not wake the task; the next one does.
          expect(settled.sinceVersion).toBe(1);
          expect(await app.sendSignal(`race.${i}`, 'next')).toBe(2);
          await waitFor(async () => (await tis(app!, 'racing', runId))[`race_${i}`]!.state === 'success', { what: `race_${i} woken by the next` });
          expect((await tis(app, 'racing', runId))[`race_${i}`]!.value).toMatchObject({ version: 2, value: 'next' });
          outcomes.push('sent before: ignored');
        }
      }
      expect(await app.waitForDagRun('racing', runId)).toBe('success');
      expect(outcomes).toHaveLength(rounds);
    } finally {
      announced.close();
    }
  }, 120_000);
});
