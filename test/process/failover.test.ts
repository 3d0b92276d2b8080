/**
 * Failover in seconds, with real processes on both dialects: a triggerer killed with SIGKILL is
 * known dead by its liveness lock (a PostgreSQL session advisory lock; on SQLite an OS lock on a
 * file), far below the heartbeat threshold, and a peer runs its triggers; a triggerer stopped with
 * SIGTERM hands its triggers over and wakes its peers in the same step; a frozen one (SIGSTOP)
 * keeps its lock and is taken over by the heartbeat threshold only, while live triggerers on a
 * machine saturated by CPU hogs, paused half a second now and then, are never taken over; an
 * owner with no job row is released at the next pass; behind a pooler in transaction mode, where
 * no lock holds, the heartbeat threshold still tells. The benchmark (`npm run bench:failover`) measures the figures; the
 * bounds here are generous.
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { TaskDeferred } from '../../src/index.ts';
import { openStores } from '../../src/storage/index.ts';
import { DueTrigger, NeverTrigger, triggerStarts } from '../fixtures/test-triggers.ts';
import { dropTestDatabases, testDialects } from '../support/databases.ts';
import { createTaskInstance, type TestDatabase, waitFor } from '../support/fixtures.ts';
import { freeze, freezeInTransaction, spawnTriggerer, type TriggererProcess } from '../support/processes.ts';
import { processScratch } from '../support/process-scratch.ts';
import { postgresProxy } from '../support/postgres-proxy.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

/** How many triggers each test defers (enough to spread over a few claims, few enough to be quick). */
const TRIGGERS = 40;

describe.each(testDialects)('failover on %s', (dialect) => {
  /** A database, and the file its test triggers write their start lines to (see triggerStarts). */
  async function setup(name: string) {
    const db = await scratch.database(dialect);
    const file = path.join(scratch.dir(`failover-${name}`), 'triggers.log');
    writeFileSync(file, '');
    return { db, file };
  }

  /** A triggerer whose heartbeat threshold is long: what it shows fast, the lock (or the stop) did. */
  async function triggerer(
    db: Pick<TestDatabase, 'url'>,
    { threshold = 60, heartbeat = 1, extra = [] as string[] } = {},
  ): Promise<{ proc: TriggererProcess; jobId: number }> {
    const proc = spawnTriggerer([
      '--db',
      db.url,
      '--trigger-module',
      'test/fixtures/test-triggers.ts',
      '--heartbeat-interval',
      String(heartbeat),
      '--health-check-threshold',
      String(threshold),
      ...extra,
    ]);
    return { proc, jobId: await proc.waitForJob(20_000) };
  }

  /** Defers TRIGGERS waits, tagged from `from` on. */
  async function deferTriggers(db: TestDatabase, file: string, from = 0): Promise<void> {
    const storage = openStores(db);
    for (let n = from; n < from + TRIGGERS; n++) {
      const id = await createTaskInstance(db, { taskId: `t${n}` });
      await storage.taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger: new NeverTrigger({ file, tag: `n${n}` }), method: 'resume' }));
    }
  }

  /** Defers TRIGGERS waits, and waits until `holder` runs every one. */
  async function deferTo(db: TestDatabase, file: string, holder: { jobId: number }): Promise<void> {
    await deferTriggers(db, file);
    await waitFor(async () => (await owned(db, holder.jobId)) === TRIGGERS && triggerStarts(file).size === TRIGGERS, {
      what: `triggerer ${holder.jobId} running every trigger`,
    });
  }

  async function owned(db: TestDatabase, jobId: number): Promise<number> {
    const row = await db.db
      .selectFrom('trigger')
      .select((eb) => eb.fn.countAll().as('n'))
      .where('triggerer_id', '=', jobId)
      .executeTakeFirstOrThrow();
    return Number(row.n);
  }

  it('a SIGKILLed triggerer is known dead by its liveness lock: a peer runs all its triggers within seconds, far below the 60 s threshold', async () => {
    const { db, file } = await setup('kill');
    const victim = await triggerer(db);
    await deferTo(db, file, victim);
    const job = await db.db.selectFrom('job').select(['liveness_lock']).where('id', '=', victim.jobId).executeTakeFirstOrThrow();
    expect(job.liveness_lock).toMatch(dialect === 'postgres' ? /^pg-advisory$/ : /^file:.*\.liveness\/job-\d+$/);
    const survivor = await triggerer(db);

    const killedAt = Date.now();
    victim.proc.kill('SIGKILL');
    await waitFor(() => [...triggerStarts(file).values()].every((pids) => pids.includes(survivor.proc.pid!)), {
      timeoutMs: 10_000,
      intervalMs: 20,
      what: 'the survivor running every trigger',
    });
    const takeoverMs = Date.now() - killedAt;
    // The target is 2 s at the 99th percentile (bench:failover); a loaded CI machine gets room.
    expect(takeoverMs).toBeLessThan(6000);
    expect(await owned(db, survivor.jobId)).toBe(TRIGGERS);
    // The victim never ended its row: its lock, not its row, told.
    expect(await db.db.selectFrom('job').select(['state', 'end_date']).where('id', '=', victim.jobId).executeTakeFirstOrThrow()).toEqual({
      state: 'running',
      end_date: null,
    });
    // Its log line is read from a pipe that may lag the triggers' own record on a loaded machine: waited for.
    const released = (line: { msg?: unknown }) => line.msg === `released ${TRIGGERS} trigger(s) of dead triggerers`;
    await survivor.proc.waitForLine(released);
    expect(survivor.proc.matching(released)).toHaveLength(1);
    // Every trigger ran on the victim, then once on the survivor.
    for (const [tag, pids] of triggerStarts(file)) expect(pids, tag).toEqual([victim.proc.pid, survivor.proc.pid]);
    // The dead job's row says running for ever and its lock is free: told once, not in a loop.
    if (dialect === 'postgres') {
      await waitFor(async () => (await owned(db, survivor.jobId)) === TRIGGERS && survivor.proc.lines.length > 0, { what: 'a settled survivor' });
      expect(survivor.proc.matching((line) => line.msg === `job ${victim.jobId}'s process is gone (its liveness lock is free)`).length).toBeLessThanOrEqual(1);
    }
  }, 60_000);

  it.runIf(dialect === 'postgres')(
    'a triggerer cut off from the database is taken for gone; once back it is watched again, and killed then it is taken over by its lock',
    async () => {
      const { db, file } = await setup('cut-and-return');
      const proxy = await postgresProxy(db.url);
      try {
        // The default heartbeat interval: its next heartbeat comes seconds after it has its lock again.
        const returning = await triggerer({ url: proxy.url }, { heartbeat: 5 });
        await deferTo(db, file, returning);
        // Room for the first TRIGGERS only: the ones deferred after the return are the returning
        // one's. It polls every 30 s: only its ring of lock waits can tell the kill below sooner.
        const watcher = await triggerer(db, { extra: ['--capacity', String(TRIGGERS), '--poll-interval', '30'] });
        const cutAt = Date.now();
        await proxy.cut();
        await waitFor(async () => (await owned(db, watcher.jobId)) === TRIGGERS, { timeoutMs: 15_000, what: 'the watcher taking every trigger over' });
        expect(Date.now() - cutAt).toBeLessThan(10_000);
        await proxy.restore();
        // Back: it finds its triggers taken over and stops its copies; its heartbeat moves on.
        await returning.proc.waitForLine((line) => /no longer ours \(taken over\)/.test(String(line.msg)), 20_000);
        await deferTriggers(db, file, TRIGGERS);
        const claimedAt = Date.now();
        await waitFor(async () => (await owned(db, returning.jobId)) === TRIGGERS, { what: 'the returning triggerer running the new triggers' });
        // A heartbeat since: the watcher's pass on the deferrals' wake-up is long over (it could tell the kill by itself).
        await waitFor(
          async () => {
            const job = await db.db.selectFrom('job').select('latest_heartbeat').where('id', '=', returning.jobId).executeTakeFirstOrThrow();
            return new Date(job.latest_heartbeat ?? 0).getTime() > claimedAt;
          },
          { timeoutMs: 15_000, what: 'a heartbeat of the returning triggerer' },
        );
        const killedAt = Date.now();
        returning.proc.kill('SIGKILL');
        await waitFor(async () => (await owned(db, returning.jobId)) === 0, {
          timeoutMs: 30_000,
          intervalMs: 50,
          what: 'the killed triggerer’s triggers released',
        });
        // Its lock told, not the 60 s threshold: the watcher watches a process that came back.
        expect(Date.now() - killedAt).toBeLessThan(6000);
        // Every trigger of both deaths released (a busy machine may split one death's release over
        // two passes). The lines come through a pipe that may lag the rows on a loaded machine:
        // waited for, then counted, so that a release told twice still fails.
        const released = () =>
          watcher.proc
            .matching((line) => /^released \d+ trigger\(s\) of dead triggerers$/.test(String(line.msg)))
            .reduce((sum, line) => sum + Number(/\d+/.exec(String(line.msg))![0]), 0);
        await waitFor(() => released() >= 2 * TRIGGERS, { timeoutMs: 10_000, what: "the watcher's 'released' lines of both deaths" });
        expect(released()).toBe(2 * TRIGGERS);
      } finally {
        proxy.close();
      }
    },
    90_000,
  );

  it('a SIGTERMed triggerer releases its triggers and wakes its peers in one step: a peer runs them at once', async () => {
    const { db, file } = await setup('stop');
    const leaving = await triggerer(db);
    await deferTo(db, file, leaving);
    // The peer polls every 30 s: only the wake-up makes it claim sooner.
    const peer = await triggerer(db, { extra: ['--poll-interval', '30'] });
    leaving.proc.kill('SIGTERM');
    const released = await leaving.proc.waitForLine((line) => line.released_triggers === TRIGGERS && line.job_id === leaving.jobId, 15_000);
    const releasedAt = Number(released.time);
    await waitFor(() => [...triggerStarts(file).values()].every((pids) => pids.includes(peer.proc.pid!)), {
      timeoutMs: 10_000,
      intervalMs: 20,
      what: 'the peer running every trigger',
    });
    expect(Date.now() - releasedAt).toBeLessThan(5000);
    expect(await leaving.proc.exit).toEqual({ code: 0, signal: null });
    expect(await owned(db, peer.jobId)).toBe(TRIGGERS);
  }, 60_000);

  it('a frozen triggerer (SIGSTOP) keeps its lock: it is taken over by the heartbeat threshold, not before', async () => {
    const { db, file } = await setup('freeze');
    const frozen = await triggerer(db, { threshold: 4 });
    await deferTriggers(db, file);
    await waitFor(async () => (await owned(db, frozen.jobId)) === TRIGGERS, { what: 'the first triggerer owning every trigger' });
    const peer = await triggerer(db, { threshold: 4 });
    const stoppedAt = Date.now();
    await freeze(frozen.proc, db.url);
    await waitFor(async () => (await owned(db, peer.jobId)) === TRIGGERS, { timeoutMs: 15_000, intervalMs: 50, what: 'the peer owning every trigger' });
    // Its last heartbeat was at most a second before the stop: the threshold (4 s) less that.
    expect(Date.now() - stoppedAt).toBeGreaterThanOrEqual(2900);
    frozen.proc.kill('SIGKILL');
  }, 60_000);

  it('a triggerer that claims after its peer last passed wakes the peer: frozen right after, it is still taken over at the threshold', async () => {
    const { db, file } = await setup('claim-wakes-peers');
    // Both idle before anything is deferred: the deferral wakes both, one claims, and the other's
    // pass has read the owners before that claim; its next safety-net pass is 20 s away, past the
    // bound below, so only the claim's own wake-up lets it watch the owner's heartbeat in time.
    const one = await triggerer(db, { threshold: 4 });
    const two = await triggerer(db, { threshold: 4 });
    const storage = openStores(db);
    const id = await createTaskInstance(db, { taskId: 'lone' });
    await storage.taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger: new NeverTrigger({ file, tag: 'lone' }), method: 'resume' }));
    const owner = await waitFor(async () => ((await owned(db, one.jobId)) === 1 ? one : (await owned(db, two.jobId)) === 1 ? two : null), {
      what: 'one triggerer owning the trigger',
    });
    const peer = owner === one ? two : one;
    const frozenAt = Date.now();
    await freeze(owner.proc, db.url);
    await waitFor(async () => (await owned(db, peer.jobId)) === 1, { timeoutMs: 15_000, intervalMs: 50, what: 'the peer owning the trigger' });
    // The threshold (4 s) less the last heartbeat's age (under 1 s), and a pass.
    expect(Date.now() - frozenAt).toBeLessThan(12_000);
    owner.proc.kill('SIGKILL');
  }, 60_000);

  // On SQLite a process frozen inside a write holds the one write lock and every process waits on
  // it until it thaws (freeze() avoids that moment); on PostgreSQL only its rows are locked, and
  // the server ends such a session.
  it.runIf(dialect === 'postgres')(
    'a triggerer frozen inside a transaction that holds trigger rows is still taken over by the threshold: PostgreSQL ends the idle transaction, freeing its locks',
    async () => {
      const { db, file } = await setup('freeze-in-transaction');
      const frozen = await triggerer(db, { threshold: 4 });
      // Triggers firing all along (about 15 a second), each batch of events one transaction.
      const storage = openStores(db);
      const count = 300;
      const firstDueAt = Date.now() + 3000;
      for (let n = 0; n < count; n++) {
        const id = await createTaskInstance(db, { taskId: `due${n}` });
        const trigger = new DueTrigger({ file, n, at: firstDueAt + n * 67 });
        await storage.taskInstances.deferTaskInstance(id, new TaskDeferred({ trigger, method: 'resume' }));
      }
      const peer = await triggerer(db, { threshold: 4 });
      await waitFor(async () => (await owned(db, frozen.jobId)) > 0 && Date.now() >= firstDueAt, { what: 'the first triggerer firing its triggers' });
      await freezeInTransaction(frozen.proc, db.db);
      const stoppedAt = Date.now();
      // Without the server's timeout the peer's release would wait on the frozen locks until the thaw.
      await waitFor(async () => (await owned(db, frozen.jobId)) === 0, { timeoutMs: 20_000, intervalMs: 50, what: 'the peer taking every trigger over' });
      expect(Date.now() - stoppedAt).toBeLessThan(15_000);
      // The peer logs the release once it has committed: its line may come after the rows show it.
      const releasedFrozen = (line: Record<string, unknown>) => (line.dead_triggerers as number[] | undefined)?.includes(frozen.jobId) === true;
      await peer.proc.waitForLine(releasedFrozen, 10_000);
      expect(peer.proc.matching(releasedFrozen)).toHaveLength(1);
      frozen.proc.kill('SIGCONT');
      const pending = async () =>
        Number(
          (
            await db.db
              .selectFrom('task_instance')
              .select((eb) => eb.fn.countAll().as('n'))
              .where('state', '=', 'deferred')
              .executeTakeFirstOrThrow()
          ).n,
        );
      await waitFor(async () => (await pending()) === 0, { timeoutMs: 40_000, what: 'every task instance moved on' });
      // The thawed process finds its session gone (its write is retried) and its triggers taken
      // over: it stops its copies and carries on, and stops cleanly.
      await frozen.proc.waitForLine((line) => /no longer ours \(taken over\)/.test(String(line.msg)), 10_000);
      frozen.proc.kill('SIGTERM');
      expect(await frozen.proc.exit).toEqual({ code: 0, signal: null });
    },
    90_000,
  );

  // On PostgreSQL, the dialect of several triggerers (on SQLite the heartbeats are the same code,
  // and the run costs the rest of the suite a saturated machine for as long again).
  it.runIf(dialect === 'postgres')(
    'no false takeover: two triggerers on default thresholds keep their triggers through 11 s of four CPU hogs and 500 ms pauses',
    async () => {
      const { db, file } = await setup('starved');
      // Default heartbeat interval (5 s) and threshold (10 s): what is tested is what users run.
      const spawnDefault = async () => {
        const proc = spawnTriggerer(['--db', db.url, '--trigger-module', 'test/fixtures/test-triggers.ts', '--capacity', String(TRIGGERS / 2)]);
        return { proc, jobId: await proc.waitForJob(20_000) };
      };
      const a = await spawnDefault();
      const b = await spawnDefault();
      await deferTriggers(db, file);
      await waitFor(async () => (await owned(db, a.jobId)) === TRIGGERS / 2 && (await owned(db, b.jobId)) === TRIGGERS / 2, {
        what: 'each triggerer owning half',
      });
      const hogs = Array.from({ length: 4 }, () => spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }));
      try {
        // Past the threshold (10 s): a heartbeat late by it would have been taken for a death.
        const until = Date.now() + 11_000;
        while (Date.now() < until) {
          // A stop-the-world pause of half a second, now one triggerer, now the other.
          for (const paused of [a, b]) {
            await freeze(paused.proc, db.url);
            await new Promise((resolve) => setTimeout(resolve, 500));
            paused.proc.kill('SIGCONT');
            await new Promise((resolve) => setTimeout(resolve, 1000));
          }
        }
      } finally {
        for (const hog of hogs) hog.kill('SIGKILL');
      }
      expect(await owned(db, a.jobId)).toBe(TRIGGERS / 2);
      expect(await owned(db, b.jobId)).toBe(TRIGGERS / 2);
      for (const proc of [a.proc, b.proc]) expect(proc.matching((line) => /of dead triggerers/.test(String(line.msg)))).toEqual([]);
      // Each trigger started once: none was ever taken over.
      for (const [tag, pids] of triggerStarts(file)) expect(pids, tag).toHaveLength(1);
    },
    90_000,
  );

  it.runIf(dialect === 'postgres')(
    'behind a pooler in transaction mode (no session lock, no LISTEN) a triggerer says so once and is taken over by its heartbeat threshold',
    async () => {
      const { db, file } = await setup('pooler');
      const pooler = await postgresProxy(db.url, { transactionPooling: true });
      try {
        const pooled = await triggerer({ url: pooler.url }, { threshold: 4 });
        await pooled.proc.waitForLine((line) => String(line.msg).includes('do not stay on one PostgreSQL session'), 10_000);
        const job = await db.db.selectFrom('job').select(['liveness_lock']).where('id', '=', pooled.jobId).executeTakeFirstOrThrow();
        expect(job.liveness_lock).toBeNull();
        await deferTo(db, file, pooled);
        // The LISTEN probe never comes back either: polls carry it.
        await pooled.proc.waitForLine((line) => String(line.msg).includes('LISTEN/NOTIFY does not reach this process'), 20_000);
        const peer = await triggerer(db, { threshold: 4 });
        const killedAt = Date.now();
        pooled.proc.kill('SIGKILL');
        await waitFor(() => [...triggerStarts(file).values()].every((pids) => pids.includes(peer.proc.pid!)), {
          timeoutMs: 20_000,
          intervalMs: 50,
          what: 'the peer running every trigger',
        });
        // No lock to tell at once: the threshold (4 s) less the last heartbeat's age (under 1 s).
        expect(Date.now() - killedAt).toBeGreaterThanOrEqual(2900);
        const released = (line: { msg?: unknown }) => line.msg === `released ${TRIGGERS} trigger(s) of dead triggerers`;
        await peer.proc.waitForLine(released);
        expect(peer.proc.matching(released)).toHaveLength(1);
        expect(pooled.proc.matching((line) => String(line.msg).includes('do not stay on one PostgreSQL session'))).toHaveLength(1);
      } finally {
        pooler.close();
      }
    },
    60_000,
  );

  it('the triggers of an owner with no job row are released at the next pass', async () => {
    const { db, file } = await setup('ownerless');
    await deferTriggers(db, file);
    await db.db.updateTable('trigger').set({ triggerer_id: 987_654 }).execute();
    const started = Date.now();
    const peer = await triggerer(db);
    await waitFor(async () => (await owned(db, peer.jobId)) === TRIGGERS, { timeoutMs: 10_000, what: 'the triggerer owning every trigger' });
    // Its first pass: well before the 30 s cleanup that used to release them.
    expect(Date.now() - started).toBeLessThan(10_000);
  }, 60_000);
});
