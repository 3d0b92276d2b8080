// `deferflow jobs list` and `jobs check`: a job row's state says what its process last wrote; a
// process killed with SIGKILL never ends its row, so both judge liveness as the daemons do: by its
// liveness lock (freed with the process) and its heartbeat.
import { afterAll, describe, expect, it } from 'vitest';
import { dropTestDatabases, oneDialect } from '../support/databases.ts';
import { waitFor } from '../support/fixtures.ts';
import { processScratch } from '../support/process-scratch.ts';
import { spawnDeferflow, spawnTriggerer, type TriggererProcess, stopCleanly } from '../support/processes.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

type JobJson = { id: number; job_type: string; state: string; liveness: string; heartbeat_age_s: number | null };
// The threshold the listing judges triggerers by: the triggerers' own --health-check-threshold,
// long, so that what tells of a killed one at once is its freed liveness lock.
const JUDGED_BY = { DEFERFLOW_TRIGGERER_HEALTH_CHECK_THRESHOLD: '60', DEFERFLOW_TRIGGERER_HEARTBEAT_INTERVAL: '0.2' };

// What differs between dialects (the listing's query, liveness locks) is tested on each in
// test/unit/listings.test.ts and test/process/failover.test.ts; the commands run on one.
describe.each(oneDialect)('deferflow jobs list on %s', (dialect) => {
  it('shows a SIGKILLed triggerer as dead though its row still says running, a live one alive, a stopped one ended', async () => {
    const db = await scratch.database(dialect);
    const list = async (...more: string[]) => {
      const proc = spawnDeferflow(['jobs', 'list', '--db', db.url, ...more], JUDGED_BY);
      const exit = await proc.exit;
      expect(exit, proc.describe()).toEqual({ code: 0, signal: null });
      return proc.text;
    };
    const jobs = async () => JSON.parse((await list('--json')).join('\n')) as JobJson[];
    const start = (proc: TriggererProcess) => proc.waitForJob();
    const fast = ['--db', db.url, '--heartbeat-interval', '0.2', '--health-check-threshold', '60'];
    const killed = spawnTriggerer(fast);
    const stopped = spawnTriggerer(fast);
    const live = spawnTriggerer(fast);
    const [killedId, stoppedId, liveId] = await Promise.all([start(killed), start(stopped), start(live)]);

    killed.kill('SIGKILL');
    await killed.exit;
    await stopCleanly([stopped]);
    const byId = async () => Object.fromEntries((await jobs()).map((job) => [job.id, job]));
    const settled = await waitFor(
      async () => {
        const now = await byId();
        return now[killedId]?.liveness === 'dead' ? now : null;
      },
      { what: 'the killed triggerer judged dead', timeoutMs: 20_000, intervalMs: 200 },
    );
    expect(settled[killedId]).toMatchObject({ job_type: 'TriggererJob', state: 'running', liveness: 'dead' });
    // Dead by its lock, long before its heartbeat would have told.
    expect(settled[killedId]!.heartbeat_age_s).toBeLessThan(60);
    expect(settled[stoppedId]).toMatchObject({ state: 'success', liveness: 'ended' });
    expect(settled[liveId]).toMatchObject({ state: 'running', liveness: 'alive' });

    const table = await list('--type', 'triggerer');
    expect(table[0]).toMatch(/^ID +TYPE +LIVENESS +STATE +HOST +PID +QUEUES +LAST HEARTBEAT +STARTED$/);
    expect(table.find((line) => line.startsWith(`${killedId} `))).toMatch(/TriggererJob +dead +running +\S+ +\d+ +default /);
    expect(await list('--type', 'worker')).toEqual(['no jobs']);
    await stopCleanly([live]);
  }, 60_000);
});

describe.each(oneDialect)('deferflow jobs check on %s', (dialect) => {
  it('exits 1 with no triggerer, 0 with a live one, 1 once it was SIGKILLed; filters by type and host; more than one live job needs --allow-multiple', async () => {
    const db = await scratch.database(dialect);
    const check = async (...more: string[]) => {
      const proc = spawnDeferflow(['jobs', 'check', '--db', db.url, ...more], JUDGED_BY);
      const exit = await proc.exit;
      return { code: exit.code, text: proc.text.join('\n') };
    };
    expect(await check('--job-type', 'triggerer')).toEqual({
      code: 1,
      text: 'no live triggerer found (0 running row(s) looked at, none alive: a fresh heartbeat and a held liveness lock)',
    });

    const fast = ['--db', db.url, '--heartbeat-interval', '0.2', '--health-check-threshold', '60'];
    const first = spawnTriggerer(fast);
    const firstId = await first.waitForJob();
    const alive = await check('--job-type', 'triggerer');
    expect(alive.code).toBe(0);
    expect(alive.text).toMatch(new RegExp(`^found 1 live triggerer \\(job ${firstId} on host \\S+\\)$`));
    expect((await check('--job-type', 'worker')).code).toBe(1);
    expect((await check('--job-type', 'triggerer', '--hostname', 'no-such-host')).text).toBe(
      'no live triggerer on no-such-host found (0 running row(s) looked at, none alive: a fresh heartbeat and a held liveness lock)',
    );

    const second = spawnTriggerer(fast);
    await second.waitForJob();
    // The freshest one is looked at by default; two with --limit 2.
    expect((await check('--job-type', 'triggerer')).code).toBe(0);
    const two = await check('--job-type', 'triggerer', '--limit', '2');
    expect(two.code).toBe(1);
    expect(two.text).toMatch(/^found 2 live triggerers \(job \d+, job \d+\); expected one \(pass --allow-multiple\)$/);
    expect((await check('--job-type', 'triggerer', '--limit', '2', '--allow-multiple')).code).toBe(0);

    await stopCleanly([second]);
    first.kill('SIGKILL');
    await first.exit;
    // Its row still says running; its freed liveness lock fails the check, long before the threshold.
    const dead = await waitFor(
      async () => {
        const result = await check('--job-type', 'triggerer');
        return result.code === 1 ? result : null;
      },
      { what: 'the check failing for the killed triggerer', timeoutMs: 20_000, intervalMs: 200 },
    );
    expect(dead.text).toBe('no live triggerer found (1 running row(s) looked at, none alive: a fresh heartbeat and a held liveness lock)');
    expect((await check('--job-type', 'triggerer', '--limit', 'x')).code).not.toBe(0);
  }, 60_000);
});
