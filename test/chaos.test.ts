// The chaos run in short (npm run chaos runs the long one): three triggerers, two workers and a
// scheduler on PostgreSQL, a SIGKILL of a random one every 1.5 s while 400 triggers come due,
// and the database unreachable for 3 s halfway through; no process may exit on its own, and the
// database's own log of state changes must show every task instance moved exactly once (per try)
// and done.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import { REPO_ROOT } from './support/processes.ts';

describe('chaos, short, on postgres', () => {
  it('moves every task instance exactly once and finishes it, whatever process is killed, through a database outage', async () => {
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        path.join(REPO_ROOT, 'scripts/chaos.ts'),
        '--db',
        inject('pgUrl'),
        '--tis',
        '400',
        '--window',
        '6',
        '--lead',
        '3',
        '--fault-every',
        '1.5',
        '--outage',
        '3',
      ],
      { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    const summary = JSON.parse(out.trim().split('\n').at(-1) ?? '{}') as Record<string, number>;
    expect(summary, `${out}\n${err}`).toMatchObject({ tis: 400, moved_once: 400, moved_twice: 0, lost: 0, not_done: 0, crashes: 0 });
    expect(summary.faults).toBeGreaterThanOrEqual(3);
    expect(code).toBe(0);
  }, 120_000);
});
