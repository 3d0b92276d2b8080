// The process's one helper thread: services installed side by side on it (the triggerer's
// watchdog, the keyring's sealing), the thread started with the first and ended with the last.
import { once } from 'node:events';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { sqliteAdapter } from '../src/db/dialect.ts';
import { Keyring } from '../src/encryption/keyring.ts';
import { SealingThread } from '../src/encryption/sealing-thread.ts';
import { Watchdog } from '../src/triggerer/watchdog.ts';
import { helperThreadId, installService, type HelperService } from '../src/threads/helper-thread.ts';
import { waitFor } from './support/fixtures.ts';

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

    first.remove();
    expect((await ask(second)).name).toBe('second');
    second.remove();
    expect(helperThreadId()).toBeNull();
    expect(lost).toEqual([]);

    // The next service starts a thread again.
    const third = installService({ source: WHERE_AM_I, data: { name: 'third' }, onLost: (reason) => lost.push(reason) });
    expect((await ask(third)).threadId).toBe(helperThreadId());
    third.remove();
  });

  it('drops a service whose setup throws, saying why, and keeps the others running', async () => {
    const healthy = installService({ source: WHERE_AM_I, data: { name: 'healthy' }, onLost: () => {} });
    let lostReason: string | null = null;
    installService({ source: `throw new Error('broken setup: ' + data.why);`, data: { why: 'no config' }, onLost: (reason) => (lostReason = reason) });
    await waitFor(() => lostReason !== null, { what: 'the broken service to be reported', timeoutMs: 10_000 });
    expect(lostReason).toContain('broken setup: no config');
    expect((await ask(healthy)).name).toBe('healthy');
    healthy.remove();
    expect(helperThreadId()).toBeNull();
  });

  it("holds the triggerer's watchdog and the keyring's sealing on the same thread", async () => {
    const watchdog = new Watchdog({ limitMs: 10_000, quarantineAfter: 2 }, 'sqlite::memory:', sqliteAdapter, pino({ level: 'silent' }));
    watchdog.start();
    const watching = helperThreadId();
    expect(watching).not.toBeNull();

    const key = Buffer.alloc(32, 7);
    const sealing = new SealingThread([{ id: 'k1', bytes: key }], 'k1');
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
