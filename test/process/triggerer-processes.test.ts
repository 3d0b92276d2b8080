/**
 * High availability with real triggerer processes (`node bin/triggerer.js`) sharing one
 * PostgreSQL database: how they split the work, take over from a killed peer, hand over on a
 * graceful stop, respect capacity, and how they exit on signals. No mocks: the assertions are
 * on database rows, exit codes, printed log lines and the files the test triggers write.
 */
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { toDbTime } from '../../src/database/schema.ts';
import { dropTestDatabases } from '../support/databases.ts';
import { migratedDatabase, parsePlain, type TestDatabase, waitFor } from '../support/fixtures.ts';
import { killLeftovers, spawnTriggerer, type LogLine, type TriggererProcess } from '../support/processes.ts';

afterAll(dropTestDatabases);

const open: { databases: TestDatabase[]; files: string[] } = { databases: [], files: [] };

afterEach(async () => {
  await killLeftovers();
  await Promise.all(open.databases.splice(0).map((db) => db.close()));
  for (const file of open.files.splice(0)) rmSync(file, { force: true });
});

async function database(): Promise<TestDatabase> {
  const db = await migratedDatabase('postgres');
  open.databases.push(db);
  return db;
}

/** An empty file the test triggers append to. */
function scratchFile(name: string): string {
  const file = path.join(os.tmpdir(), `deferflow-ha-${name}-${process.pid}-${Date.now()}.log`);
  writeFileSync(file, '');
  open.files.push(file);
  return file;
}

function fileLines(file: string): string[][] {
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => line.trim().split(/\s+/));
}

interface Started {
  readonly proc: TriggererProcess;
  readonly jobId: number;
}

/** Starts triggerers with the test triggers allowed and short intervals; resolves once each has its job id. */
async function startTriggerers(db: TestDatabase, count: number, options: Record<string, number>): Promise<Started[]> {
  const settings: Record<string, number> = {
    'poll-interval': 0.2,
    'heartbeat-interval': 0.5,
    'health-check-threshold': 3,
    'claims-per-loop': 200,
    ...options,
  };
  const args = ['--db', db.url, '--trigger-module', 'test/fixtures/test-triggers.ts'];
  for (const [name, value] of Object.entries(settings)) args.push(`--${name}`, String(value));
  const procs = Array.from({ length: count }, () => spawnTriggerer(args));
  return Promise.all(
    procs.map(async (proc) => {
      const start = await proc.waitForLine((line) => typeof line.job_id === 'number' && typeof line.config === 'object', 20_000);
      return { proc, jobId: Number(start.job_id) };
    }),
  );
}

interface DeferSpec {
  readonly n: number;
  readonly classpath: string;
  readonly kwargs: Record<string, string | number>;
}

/**
 * In one transaction, a few multi-row inserts: a trigger row per spec (kwargs carry `n`) and a
 * task instance `t<n>` deferred on it. Returns trigger id → n.
 */
async function deferMany(db: TestDatabase, specs: readonly DeferSpec[]): Promise<Map<number, number>> {
  const now = toDbTime(Date.now());
  const triggerToN = new Map<number, number>();
  await db.db.transaction().execute(async (trx) => {
    for (let i = 0; i < specs.length; i += 1000) {
      const chunk = specs.slice(i, i + 1000);
      const triggers = await trx
        .insertInto('trigger')
        .values(
          chunk.map((spec) => ({
            classpath: spec.classpath,
            kwargs: JSON.stringify({ ...spec.kwargs, n: spec.n }),
            created_at: now,
            triggerer_id: null,
            hash: null,
          })),
        )
        .returning(['id', 'kwargs'])
        .execute();
      const nToTrigger = new Map<number, number>();
      for (const row of triggers) {
        const n = Number((parsePlain(row.kwargs) as { n: number }).n);
        nToTrigger.set(n, row.id);
        triggerToN.set(row.id, n);
      }
      await trx
        .insertInto('task_instance')
        .values(
          chunk.map((spec) => ({
            dag_id: 'ha_dag',
            task_id: `t${spec.n}`,
            run_id: 'manual__1',
            state: 'deferred' as const,
            trigger_id: nToTrigger.get(spec.n)!,
            next_method: 'resume',
            next_kwargs: '{}',
            start_date: now,
          })),
        )
        .execute();
    }
  });
  return triggerToN;
}

/** Trigger count per owner (key null: unowned). */
async function owners(db: TestDatabase): Promise<Map<number | null, number>> {
  const rows = await db.db
    .selectFrom('trigger')
    .select(['triggerer_id', (eb) => eb.fn.countAll().as('n')])
    .groupBy('triggerer_id')
    .execute();
  return new Map(rows.map((row) => [row.triggerer_id === null ? null : Number(row.triggerer_id), Number(row.n)]));
}

async function ownedIds(db: TestDatabase, jobId: number): Promise<number[]> {
  const rows = await db.db.selectFrom('trigger').select('id').where('triggerer_id', '=', jobId).execute();
  return rows.map((row) => row.id);
}

async function triggerCount(db: TestDatabase): Promise<number> {
  return Number(
    (
      await db.db
        .selectFrom('trigger')
        .select((eb) => eb.fn.countAll().as('n'))
        .executeTakeFirstOrThrow()
    ).n,
  );
}

async function deferredCount(db: TestDatabase): Promise<number> {
  const row = await db.db
    .selectFrom('task_instance')
    .select((eb) => eb.fn.countAll().as('n'))
    .where('state', '=', 'deferred')
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

async function job(db: TestDatabase, jobId: number) {
  return db.db.selectFrom('job').select(['state', 'end_date', 'pid']).where('id', '=', jobId).executeTakeFirstOrThrow();
}

const sum = (lines: LogLine[], key: string) => lines.reduce((total, line) => total + Number(line[key] ?? 0), 0);
const movedBy = (proc: TriggererProcess) =>
  sum(
    proc.matching((line) => line.kind === 'event' || line.kind === 'failure'),
    'moved_task_instances',
  );
/** Lines where a pass released the triggers of dead peers (the stop line also has released_triggers, but with job_id). */
const deadPeerReleases = (proc: TriggererProcess) => proc.matching((line) => typeof line.released_triggers === 'number' && line.job_id === undefined);

/** Sends `signal` and resolves with the exit and how long it took. */
async function stopAndTime(proc: TriggererProcess, signal: NodeJS.Signals = 'SIGTERM') {
  const sentAt = Date.now();
  proc.kill(signal);
  const exit = await proc.exit;
  return { ...exit, ms: Date.now() - sentAt };
}

describe('triggerer processes on postgres (high availability)', () => {
  it('two triggerers share 2,000 triggers: each runs once, every task instance moves once', async () => {
    const db = await database();
    const file = scratchFile('share');
    // Capacity 1,500 each: neither can take all 2,000, so both must run a share (with more, one
    // may claim everything in quick full passes before the other's next poll).
    const [a, b] = await startTriggerers(db, 2, { capacity: 1500 });
    // None fires until all run (the gate opens then): a trigger fired early would free room for
    // one triggerer to claim the rest.
    const gate = `${file}.gate`;
    open.files.push(gate);
    const specs = Array.from({ length: 2000 }, (_, i) => ({ n: i + 1, classpath: 'test.GateTrigger', kwargs: { gate, file } }));
    // All at once, so both claim from the same pool at the same time; SKIP LOCKED keeps their
    // claims disjoint.
    await deferMany(db, specs);
    await waitFor(() => fileLines(file).length === 2000, { timeoutMs: 20_000, what: 'all 2,000 running' });
    writeFileSync(gate, '');

    await waitFor(async () => (await deferredCount(db)) === 0, { timeoutMs: 20_000, what: 'every task instance moved' });
    await waitFor(() => movedBy(a!.proc) + movedBy(b!.proc) >= 2000, { timeoutMs: 5000, what: 'the outcome log lines' });

    // Neither died, so no peer's triggers were ever released.
    expect(a!.proc.exited).toBeNull();
    expect(b!.proc.exited).toBeNull();
    expect([...deadPeerReleases(a!.proc), ...deadPeerReleases(b!.proc)]).toEqual([]);

    const tis = await db.db.selectFrom('task_instance').select(['task_id', 'state', 'trigger_id', 'next_method', 'next_event']).execute();
    expect(tis).toHaveLength(2000);
    for (const ti of tis) {
      const n = Number(ti.task_id.slice(1));
      expect(ti).toMatchObject({ state: 'scheduled', trigger_id: null, next_method: 'resume' });
      expect(parsePlain(ti.next_event!)).toEqual({ n });
    }
    await waitFor(async () => (await triggerCount(db)) === 0, { what: 'the fired triggers deleted' });

    // Every trigger was started exactly once, by one process; both got a share.
    const starts = fileLines(file);
    const pidsByN = new Map<number, number[]>();
    for (const [n, pid] of starts) pidsByN.set(Number(n), [...(pidsByN.get(Number(n)) ?? []), Number(pid)]);
    expect(pidsByN.size).toBe(2000);
    const twice = [...pidsByN].filter(([, pids]) => pids.length !== 1);
    expect(twice, 'triggers started more than once').toEqual([]);
    const perPid = new Map<number, number>();
    for (const [, [pid]] of pidsByN) perPid.set(pid!, (perPid.get(pid!) ?? 0) + 1);
    expect(new Set(perPid.keys())).toEqual(new Set([a!.proc.pid, b!.proc.pid]));
    expect(perPid.get(a!.proc.pid)).toBeGreaterThan(0);
    expect(perPid.get(b!.proc.pid)).toBeGreaterThan(0);
    // What each logged as claimed is what it started.
    expect(
      sum(
        a!.proc.matching((l) => typeof l.claimed === 'number'),
        'claimed',
      ),
    ).toBe(perPid.get(a!.proc.pid));
    expect(
      sum(
        b!.proc.matching((l) => typeof l.claimed === 'number'),
        'claimed',
      ),
    ).toBe(perPid.get(b!.proc.pid));

    expect(movedBy(a!.proc) + movedBy(b!.proc)).toBe(2000);
    expect([...a!.proc.matching((l) => l.kind === 'failure'), ...b!.proc.matching((l) => l.kind === 'failure')]).toEqual([]);

    const [stopA, stopB] = await Promise.all([stopAndTime(a!.proc), stopAndTime(b!.proc)]);
    expect(stopA).toMatchObject({ code: 0, signal: null });
    expect(stopB).toMatchObject({ code: 0, signal: null });
    for (const { proc, jobId } of [a!, b!]) {
      expect(proc.matching((l) => l.job_id === jobId && l.released_triggers === 0)).toHaveLength(1);
      const row = await job(db, jobId);
      expect(row.state).toBe('success');
      expect(row.end_date).not.toBeNull();
    }
  }, 45_000);

  it("a SIGKILLed triggerer's triggers are taken over at once (its liveness lock is freed), far below the health-check threshold, and each task instance moves once", async () => {
    const db = await database();
    const file = scratchFile('takeover');
    // Both must own some when one is killed, deterministically: the victim starts alone with
    // room for 300 of the 500, the survivor (room for all) then claims the other 200.
    const [victim] = (await startTriggerers(db, 1, { capacity: 300, 'health-check-threshold': 60 })) as [Started];
    // Nothing fires before the takeover is checked: the gate opens after it.
    const gate = `${file}.gate`;
    open.files.push(gate);
    const specs = Array.from({ length: 500 }, (_, i) => ({ n: i + 1, classpath: 'test.GateTrigger', kwargs: { gate, file } }));
    const triggerToN = await deferMany(db, specs);
    await waitFor(async () => (await owners(db)).get(victim.jobId) === 300, { what: 'the victim owning 300' });
    const [survivor] = (await startTriggerers(db, 1, { capacity: 2000, 'health-check-threshold': 60 })) as [Started];
    await waitFor(async () => (await owners(db)).get(survivor.jobId) === 200, { what: 'the survivor owning the other 200' });
    const counts = await owners(db);
    expect(counts.get(null) ?? 0).toBe(0);
    expect(counts.get(victim.jobId)).toBeGreaterThan(counts.get(survivor.jobId)!);
    const victimNs = new Set((await ownedIds(db, victim.jobId)).map((id) => triggerToN.get(id)!));
    expect(victimNs.size).toBe(300);
    await waitFor(() => fileLines(file).length === 500, { what: 'all 500 running' });

    const killedAt = Date.now();
    victim.proc.kill('SIGKILL');
    expect(await victim.proc.exit).toEqual({ code: null, signal: 'SIGKILL' });
    expect(await job(db, victim.jobId)).toMatchObject({ state: 'running', end_date: null });

    // Its session ended with it, and with the session its advisory lock: the survivor's watch
    // hears it and its next pass takes the triggers, long before the 60 s threshold. The gate
    // is shut, so all 500 rows are still there to be owned.
    await waitFor(async () => (await owners(db)).get(survivor.jobId) === 500, { timeoutMs: 8000, intervalMs: 50, what: 'the survivor owns all 500' });
    const takeoverMs = Date.now() - killedAt;
    expect(takeoverMs).toBeLessThan(8000);
    expect(sum(deadPeerReleases(survivor.proc), 'released_triggers')).toBe(victimNs.size);
    await waitFor(() => fileLines(file).length === 800, { what: 'the 300 taken over running again' });

    writeFileSync(gate, '');
    await waitFor(async () => (await deferredCount(db)) === 0, { what: 'every task instance moved' });
    await waitFor(() => movedBy(survivor.proc) + movedBy(victim.proc) >= 500, { timeoutMs: 5000, what: 'the outcome log lines' });
    expect(movedBy(survivor.proc) + movedBy(victim.proc)).toBe(500);
    expect(movedBy(victim.proc)).toBe(0); // killed before anything fired
    const tis = await db.db.selectFrom('task_instance').select(['task_id', 'state', 'next_event']).execute();
    expect(tis).toHaveLength(500);
    for (const ti of tis) {
      expect(ti.state).toBe('scheduled');
      expect(parsePlain(ti.next_event!)).toEqual({ n: Number(ti.task_id.slice(1)) });
    }
    await waitFor(async () => (await triggerCount(db)) === 0, { what: 'the fired triggers deleted' });

    // Who started what: the victim's triggers were re-run by the survivor; the survivor's own
    // ran once.
    const pidsByN = new Map<number, number[]>();
    for (const [n, pid] of fileLines(file)) pidsByN.set(Number(n), [...(pidsByN.get(Number(n)) ?? []), Number(pid)]);
    expect(pidsByN.size).toBe(500);
    for (const [n, pids] of pidsByN) {
      if (victimNs.has(n)) {
        expect(pids, `trigger n=${n}: run by the victim, re-run once by the survivor`).toEqual([victim.proc.pid, survivor.proc.pid]);
      } else {
        expect(pids, `trigger n=${n} of the survivor`).toEqual([survivor.proc.pid]);
      }
    }

    expect(await job(db, victim.jobId)).toMatchObject({ state: 'running', end_date: null });
    expect(await stopAndTime(survivor.proc)).toMatchObject({ code: 0, signal: null });
    expect(await job(db, survivor.jobId)).toMatchObject({ state: 'success' });
  }, 45_000);

  it('a graceful stop hands its triggers over at once, far below the health-check threshold', async () => {
    const db = await database();
    const file = scratchFile('handover');
    // Both must own some, deterministically: the victim starts alone with room for 200 of the
    // 300, then the survivor (room for all 300) claims the other 100.
    const [victim] = (await startTriggerers(db, 1, { capacity: 200, 'health-check-threshold': 60 })) as [Started];
    const specs = Array.from({ length: 300 }, (_, i) => ({ n: i + 1, classpath: 'test.NeverTrigger', kwargs: { file, tag: i + 1 } }));
    const triggerToN = await deferMany(db, specs);
    await waitFor(async () => (await owners(db)).get(victim.jobId) === 200, { what: 'the victim owning 200' });
    const [survivor] = (await startTriggerers(db, 1, { capacity: 300, 'health-check-threshold': 60 })) as [Started];
    await waitFor(async () => (await owners(db)).get(survivor.jobId) === 100, { what: 'the survivor owning the other 100' });
    expect((await owners(db)).get(null) ?? 0).toBe(0);
    const victimNs = [...new Set((await ownedIds(db, victim.jobId)).map((id) => triggerToN.get(id)!))].sort((x, y) => x - y);
    const startedLines = () => fileLines(file).filter(([what]) => what === 'start');
    await waitFor(() => startedLines().length === 300, { what: 'all 300 running' });

    const sentAt = Date.now();
    victim.proc.kill('SIGTERM');
    await waitFor(async () => (await owners(db)).get(survivor.jobId) === 300, { timeoutMs: 3000, intervalMs: 20, what: 'the survivor owns all 300' });
    const handoverMs = Date.now() - sentAt;
    const exit = await victim.proc.exit;
    const exitMs = Date.now() - sentAt;
    expect(exit).toEqual({ code: 0, signal: null });
    expect(exitMs).toBeLessThan(5000);
    expect(handoverMs).toBeLessThan(3000);
    expect(victim.proc.matching((l) => l.job_id === victim.jobId && typeof l.released_triggers === 'number').map((l) => l.released_triggers)).toEqual([
      victimNs.length,
    ]);
    const row = await job(db, victim.jobId);
    expect(row.state).toBe('success');
    expect(row.end_date).not.toBeNull();

    const lines = fileLines(file);
    const cleanedByVictim = lines.filter(([what, , pid]) => what === 'cleanup' && Number(pid) === victim.proc.pid).map(([, tag]) => Number(tag));
    expect(cleanedByVictim.sort((x, y) => x - y)).toEqual(victimNs);
    // The survivor runs them now; no peer was declared dead.
    await waitFor(() => fileLines(file).filter(([what, , pid]) => what === 'start' && Number(pid) === survivor.proc.pid).length === 300, {
      what: 'the survivor running all 300',
    });
    expect(deadPeerReleases(survivor.proc)).toEqual([]);
    expect(survivor.proc.exited).toBeNull();
  }, 30_000);

  it('capacity holds across processes: two triggerers of capacity 300 never own more than 600 of 1,000', async () => {
    const db = await database();
    const started = await startTriggerers(db, 2, { capacity: 300 });
    const ids = started.map((s) => s.jobId);
    await deferMany(
      db,
      Array.from({ length: 1000 }, (_, i) => ({ n: i + 1, classpath: 'test.NeverTrigger', kwargs: { tag: i + 1 } })),
    );
    // Sample for 3 s, and on until both are full (bounded).
    const samples: Map<number | null, number>[] = [];
    const since = Date.now();
    for (let full = false; !full || Date.now() - since < 3000; ) {
      if (Date.now() - since > 15_000) throw new Error(`capacity not reached in 15 s: ${JSON.stringify([...samples.at(-1)!])}`);
      const sample = await owners(db);
      samples.push(sample);
      full = sample.get(ids[0]!) === 300 && sample.get(ids[1]!) === 300;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(samples.length).toBeGreaterThan(30);
    for (const sample of samples) {
      for (const id of ids) expect(sample.get(id) ?? 0).toBeLessThanOrEqual(300);
      expect([...sample.keys()].every((key) => key === null || ids.includes(key))).toBe(true);
    }
    const last = samples.at(-1)!;
    expect(last.get(ids[0]!)).toBe(300);
    expect(last.get(ids[1]!)).toBe(300);
    expect(last.get(null)).toBe(400);
    for (const { proc } of started) {
      expect(
        sum(
          proc.matching((l) => typeof l.claimed === 'number'),
          'claimed',
        ),
      ).toBe(300);
      expect(proc.exited).toBeNull();
    }
  }, 30_000);

  describe('signals', () => {
    async function holdingSlowCleanup() {
      const db = await database();
      const file = scratchFile('slow-cleanup');
      const [tr] = await startTriggerers(db, 1, {});
      const [triggerId] = [...(await deferMany(db, [{ n: 1, classpath: 'test.SlowCleanupTrigger', kwargs: { file } }])).keys()];
      await waitFor(() => fileLines(file).some(([what, pid]) => what === 'start' && Number(pid) === tr!.proc.pid), { what: 'the trigger running' });
      return { db, file, tr: tr!, triggerId: triggerId! };
    }

    it('a second signal exits at once, with code 1, without waiting for cleanup', async () => {
      const { db, file, tr, triggerId } = await holdingSlowCleanup();
      const sentAt = Date.now();
      tr.proc.kill('SIGTERM');
      await tr.proc.waitForLine((l) => l.signal === 'SIGTERM', 2000);
      await new Promise((resolve) => setTimeout(resolve, 300));
      tr.proc.kill('SIGINT');
      const exit = await tr.proc.exit;
      const ms = Date.now() - sentAt;
      expect(exit).toEqual({ code: 1, signal: null });
      expect(ms).toBeLessThan(2000);
      expect(tr.proc.matching((l) => l.signal === 'SIGINT' && l.level === 40)).toHaveLength(1);
      expect(fileLines(file).filter(([what]) => what === 'cleanup')).toHaveLength(1); // begun, never finished
      // It left at once: no release, no goodbye; peers take over after the threshold.
      expect(tr.proc.matching((l) => typeof l.released_triggers === 'number')).toEqual([]);
      expect(await job(db, tr.jobId)).toMatchObject({ state: 'running', end_date: null });
      const trigger = await db.db.selectFrom('trigger').select('triggerer_id').where('id', '=', triggerId).executeTakeFirstOrThrow();
      expect(trigger.triggerer_id).toBe(tr.jobId);
    }, 20_000);

    it('one signal still exits 0 within 5 s when a cleanup hangs: the cleanup grace is bounded', async () => {
      const { db, tr, triggerId } = await holdingSlowCleanup();
      const stop = await stopAndTime(tr.proc, 'SIGTERM');
      expect(stop).toMatchObject({ code: 0, signal: null });
      expect(stop.ms).toBeLessThan(5000);
      expect(tr.proc.matching((l) => l.job_id === tr.jobId && typeof l.released_triggers === 'number').map((l) => l.released_triggers)).toEqual([1]);
      expect(tr.proc.matching((l) => l.level === 50)).toEqual([]);
      expect(await job(db, tr.jobId)).toMatchObject({ state: 'success' });
      expect((await job(db, tr.jobId)).end_date).not.toBeNull();
      const trigger = await db.db.selectFrom('trigger').select('triggerer_id').where('id', '=', triggerId).executeTakeFirstOrThrow();
      expect(trigger.triggerer_id).toBeNull();
    }, 20_000);
  });
});
