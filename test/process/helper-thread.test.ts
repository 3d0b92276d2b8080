// The process's one helper thread: services installed side by side on it (the triggerer's
// watchdog, the keyring's sealing), the thread started with the first and ended with the last.
import { execFileSync } from 'node:child_process';
import { once } from 'node:events';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { sqliteAdapter } from '../../src/database/dialect.ts';
import { Keyring } from '../../src/database/encryption/keyring.ts';
import { SealingService } from '../../src/database/encryption/sealing-service.ts';
import { ObservabilityServer } from '../../src/services/observability/http-server.ts';
import { Metrics } from '../../src/services/observability/metrics.ts';
import { Watchdog } from '../../src/daemons/triggerer/watchdog.ts';
import { helperThreadId, installService, type HelperService } from '../../src/vocabulary/helper-thread.ts';
import { waitFor } from '../support/fixtures.ts';

/** A service that answers each message with the id of the thread it runs on and its own name. */
const WHERE_AM_I = `port.on('message', () => port.postMessage({ threadId: require('node:worker_threads').threadId, name: data.name }));`;

async function ask(service: HelperService): Promise<{ threadId: number; name: string }> {
  const answer = once(service.port, 'message');
  service.port.postMessage('where');
  return (await answer)[0];
}

describe('the helper thread', () => {
  it('runs every service on one thread, apart from the event loop, and ends with the last one removed', async () => {
    expect(helperThreadId()).toBeNull();
    const lost: string[] = [];
    const first = installService({ source: WHERE_AM_I, data: { name: 'first' }, onLost: (reason) => lost.push(reason) });
    const second = installService({ source: WHERE_AM_I, data: { name: 'second' }, onLost: (reason) => lost.push(reason) });
    const [a, b] = await Promise.all([ask(first), ask(second)]);
    expect(a).toEqual({ threadId: helperThreadId(), name: 'first' });
    expect(b).toEqual({ threadId: helperThreadId(), name: 'second' });
    expect(a.threadId).toBeGreaterThan(0);

    await first.remove();
    expect((await ask(second)).name).toBe('second');
    await second.remove();
    expect(helperThreadId()).toBeNull();
    expect(lost).toEqual([]);

    // The next service starts a thread again.
    const third = installService({ source: WHERE_AM_I, data: { name: 'third' }, onLost: (reason) => lost.push(reason) });
    expect((await ask(third)).threadId).toBe(helperThreadId());
    await third.remove();
  });

  it('drops a service whose setup throws, saying why, and keeps the others running', async () => {
    const healthy = installService({ source: WHERE_AM_I, data: { name: 'healthy' }, onLost: () => {} });
    let lostReason: string | null = null;
    installService({ source: `throw new Error('broken setup: ' + data.why);`, data: { why: 'no config' }, onLost: (reason) => (lostReason = reason) });
    await waitFor(() => lostReason !== null, { what: 'the broken service to be reported', timeoutMs: 10_000 });
    expect(lostReason).toContain('broken setup: no config');
    expect((await ask(healthy)).name).toBe('healthy');
    await healthy.remove();
    expect(helperThreadId()).toBeNull();

    // Nor does a broken service alone keep a thread running.
    lostReason = null;
    installService({ source: `throw new Error('broken again');`, data: null, onLost: (reason) => (lostReason = reason) });
    await waitFor(() => lostReason !== null, { what: 'the broken service to be reported', timeoutMs: 10_000 });
    expect(helperThreadId()).toBeNull();
  });

  it("holds the triggerer's watchdog, the /health endpoint and the keyring's sealing on the same thread", async () => {
    const log = pino({ level: 'silent' });
    const watchdog = new Watchdog({ limitMs: 10_000, quarantineAfter: 2 }, 'sqlite::memory:', sqliteAdapter, log);
    watchdog.start();
    const watching = helperThreadId();
    expect(watching).not.toBeNull();

    const server = new ObservabilityServer({ host: '127.0.0.1', port: 0, loopThresholdMs: 200, optional: false }, new Metrics(), [], log);
    const address = (await server.start())!;
    expect(helperThreadId()).toBe(watching);
    // Off the loop: with the loop held past the threshold, /health still answers, and says so.
    const health = execFileSync(
      process.execPath,
      // Asked until it reports the held loop (a threshold and a tick after the child started).
      [
        '-e',
        `(async () => { for (;;) { const r = await fetch('http://127.0.0.1:${address.port}/health'); if (r.status !== 200) return process.stdout.write(r.status + ' ' + (await r.text())); } })()`,
      ],
      { encoding: 'utf8', timeout: 10_000 },
    );
    expect(health).toMatch(/^503 .*"event_loop":\{"ok":false/);
    await server.stop();
    // Stopped, it no longer listens, though the thread it ran on goes on.
    expect(
      await fetch(`http://127.0.0.1:${address.port}/health`).then(
        () => 'answered',
        () => 'refused',
      ),
    ).toBe('refused');
    expect(helperThreadId()).toBe(watching);

    const key = Buffer.alloc(32, 7);
    const sealing = new SealingService([{ id: 'k1', bytes: key }], 'k1');
    await waitFor(() => sealing.accepting(), { what: 'the sealing service to take batches', timeoutMs: 10_000 });
    const values = Array.from({ length: 100 }, (_, i) => JSON.stringify({ n: i }));
    const sealed = (await sealing.seal(values, 'trigger.kwargs', 'text')) as string[];
    expect(sealed.map((value) => Keyring.sealedWith(value))).toEqual(values.map(() => 'k1'));
    expect(await sealing.open(sealed, 'trigger.kwargs')).toEqual(values);
    expect(helperThreadId()).toBe(watching);

    // The watchdog gone, the thread stays for the sealing (had the sealing a thread of its own, this one would end).
    await watchdog.stop();
    expect(helperThreadId()).toBe(watching);
    expect(await sealing.open(sealed, 'trigger.kwargs')).toEqual(values);
  });
});
