// Every built-in trigger stops at once when cancelled, whatever it is waiting on: a timer, a
// file, a request in flight, a query's pause, a read of deferflow's database.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import pino from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import type { TriggerClass } from '../../../src/index.ts';
import { TriggerRegistry } from '../../../src/internals.ts';
import { TriggerRunner } from '../../../src/daemons/triggerer/trigger-runner.ts';
import { DateTimeTrigger, FileTrigger, HttpTrigger, SqlTrigger, TaskStateTrigger } from '../../../triggers/index.ts';
import { waitFor } from '../../support/fixtures.ts';
import { processScratch } from '../../support/process-scratch.ts';

const scratch = processScratch();
const sockets = new Set<import('node:net').Socket>();
// A server that takes requests and never answers them.
const silent = http.createServer(() => {});
silent.on('connection', (socket) => sockets.add(socket));
afterAll(async () => {
  for (const socket of sockets) socket.destroy();
  await new Promise<void>((resolve) => silent.close(() => resolve()));
});

/** `cls` with its run() wrapped to record when the generator has finished (its finally ran). */
function watched(cls: TriggerClass, onStopped: () => void, onStarted: () => void): TriggerClass {
  const Base = cls as unknown as new (kwargs: unknown) => { run(signal: AbortSignal): AsyncGenerator };
  class Watched extends Base {
    static readonly classpath = 'Watched';
    override async *run(signal: AbortSignal) {
      onStarted();
      try {
        yield* super.run(signal);
      } finally {
        onStopped();
      }
    }
  }
  return Watched as unknown as TriggerClass;
}

describe('built-in triggers, cancelled while they wait', () => {
  it.each([
    ['DateTimeTrigger', DateTimeTrigger, () => ({ moment: '2100-01-01T00:00:00Z' })],
    ['FileTrigger', FileTrigger, (dir: string) => ({ path: path.join(dir, 'never.txt'), pollInterval: 60 })],
    ['HttpTrigger (a request in flight)', HttpTrigger, () => ({ url: `http://127.0.0.1:${(silent.address() as AddressInfo).port}/`, requestTimeout: 600 })],
    ['SqlTrigger', SqlTrigger, () => ({ connection: 'cancel_sql', sql: 'select 0', pollInterval: 600 })],
    ['TaskStateTrigger (a read in flight)', TaskStateTrigger, () => ({ dagId: 'up', logicalDates: ['2026-01-01T00:00:00Z'] })],
  ] as const)('%s stops at once', async (_name, cls, kwargs) => {
    if (!silent.listening) await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const dir = scratch.dir('cancellation');
    const file = path.join(dir, 'cancel.db');
    new BetterSqlite3(file).close();
    process.env.DEFERFLOW_CONN_CANCEL_SQL = `sqlite:${file}`;
    let started = false;
    let stopped = false;
    const runner = new TriggerRunner(
      new TriggerRegistry([
        watched(
          cls as unknown as TriggerClass,
          () => (stopped = true),
          () => (started = true),
        ),
      ]),
      pino({ level: 'silent' }),
      { add: () => {} },
      // deferflow's database never answers: only the cancel can end a read.
      { blockThresholdMs: 1000, dagRunStates: () => new Promise(() => {}) },
    );
    runner.start();
    try {
      runner.startTrigger({ id: 1, classpath: 'Watched', kwargs: JSON.stringify(kwargs(dir)) });
      await waitFor(() => started, { what: 'the trigger started' });
      // Let it reach its wait (a request sent, a query run, a sleep begun).
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(stopped).toBe(false);
      await runner.cancel(1);
      // Each waits a minute or more uncancelled; a few seconds is generous for a loaded machine.
      await waitFor(() => stopped, { what: 'the generator stopped', timeoutMs: 5000 });
    } finally {
      runner.close();
      delete process.env.DEFERFLOW_CONN_CANCEL_SQL;
    }
  });
});
