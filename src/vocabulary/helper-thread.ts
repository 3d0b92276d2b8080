import { MessageChannel, type MessagePort, Worker } from 'node:worker_threads';

/**
 * One thread per process for the small jobs that must not run on the event loop: the
 * triggerer's watchdog and the /health endpoint (they must see and report the loop held, so
 * they cannot be on it) and the keyring's sealing (thousands of AES-GCM values a burst, ~3 µs
 * each). Each job is a *service*: its code,
 * installed into the thread with data of its own and a MessagePort to talk over.
 *
 * Why one thread: a Node thread is a V8 isolate with Node's bootstrap, ~10 MB of RSS before it
 * does anything (20 MB with the young generation's default), and a triggerer's memory is what
 * limits how many triggers it holds. Sealing on the watchdog's thread instead of a thread of its
 * own saved ~9 MB at 100,000 triggers (measured in a microbenchmark: 100,000 seals added 10 MB
 * to a process with one thread doing them on its existing thread, 19 MB on a second thread).
 *
 * The thread starts with the first service and ends when the last is removed; it never keeps
 * the process alive (a service refs its own port while it waits for an answer). Should it die
 * (none of its services' code throws by design), every service is told, through onLost, and the
 * next install starts a new thread.
 */
export interface HelperService {
  /** This service's end of its channel: what the service's code posts arrives here. */
  readonly port: MessagePort;
  /**
   * Stops the service (its code's returned stop function runs in the thread, and is awaited) and
   * closes its port; resolves once it has stopped (a server no longer listens).
   */
  remove(): Promise<void>;
}

export interface ServiceDefinition<Message> {
  /**
   * The body of a CommonJS function `(require, port, data) => stop?`: it sets the service up in
   * the thread (listens on `port`, starts timers) and may return a function that undoes that
   * (and may return a promise of it being undone).
   * Plain JavaScript, so the same text runs from the sources and from the built package.
   */
  readonly source: string;
  /** Given to the code as `data` (structured-cloned; a SharedArrayBuffer stays shared). */
  readonly data: unknown;
  /**
   * What the service's code posts. Listening does not keep the process alive: the port is
   * unreferenced (a service refs it itself while it waits for an answer).
   */
  readonly onMessage?: (message: Message) => void;
  /** The thread died (or the service's code threw while it was set up): `reason` says why. */
  readonly onLost: (reason: string) => void;
}

let thread: Worker | null = null;
/** The installed services' onLost, by id. */
const services = new Map<number, (reason: string) => void>();
/** Services being removed, by id: told when their thread has stopped them, or has ended. */
const removing = new Map<number, { readonly worker: Worker; readonly resolve: () => void }>();
let nextServiceId = 1;

/** Installs a service on the process's helper thread, starting the thread if it is not running. */
export function installService<Message>(definition: ServiceDefinition<Message>): HelperService {
  const worker = runningThread();
  const id = nextServiceId++;
  const { port1, port2 } = new MessageChannel();
  services.set(id, definition.onLost);
  if (definition.onMessage) port1.on('message', definition.onMessage);
  port1.unref();
  worker.postMessage({ type: 'install', id, source: definition.source, data: definition.data, port: port2 }, [port2]);
  return {
    port: port1,
    remove: async () => {
      port1.close();
      if (!services.delete(id) || thread !== worker) return;
      if (services.size === 0) return endIfUnused(worker);
      const removed = new Promise<void>((resolve) => removing.set(id, { worker, resolve }));
      worker.postMessage({ type: 'remove', id });
      await removed;
    },
  };
}

/** The thread ends with its last service (terminating it stops what its services run). */
async function endIfUnused(worker: Worker): Promise<void> {
  if (thread !== worker || services.size > 0) return;
  thread = null;
  await worker.terminate();
}

/** The helper thread's id (worker_threads' threadId), or null when it is not running. */
export function helperThreadId(): number | null {
  return thread?.threadId ?? null;
}

function runningThread(): Worker {
  if (thread) return thread;
  const worker = new Worker(HELPER_THREAD_SOURCE, {
    eval: true,
    // Its services' garbage is short-lived: a small young generation keeps the thread ~10 MB smaller.
    resourceLimits: { maxYoungGenerationSizeMb: 2 },
  });
  worker.unref();
  worker.on('message', (message: { type: 'failed'; id: number; reason: string } | { type: 'removed'; id: number }) => {
    if (message.type === 'removed') {
      removing.get(message.id)?.resolve();
      removing.delete(message.id);
      return;
    }
    const onLost = services.get(message.id);
    services.delete(message.id);
    onLost?.(message.reason);
    void endIfUnused(worker);
  });
  const lost = (reason: string) => {
    // Whatever was being removed from it is gone with the thread.
    for (const [id, removal] of removing) {
      if (removal.worker !== worker) continue;
      removing.delete(id);
      removal.resolve();
    }
    if (thread !== worker) return;
    thread = null;
    const orphans = [...services.values()];
    services.clear();
    for (const onLost of orphans) onLost(reason);
  };
  worker.on('error', (error) => lost(`the helper thread failed: ${error.message}`));
  worker.on('exit', (code) => lost(`the helper thread exited (code ${code})`));
  thread = worker;
  return worker;
}

/**
 * The thread's own code: it installs and removes services. A service whose setup throws is
 * reported and dropped; the others carry on.
 */
const HELPER_THREAD_SOURCE = `
'use strict';
const { parentPort } = require('node:worker_threads');
const running = new Map();
parentPort.on('message', (message) => {
  if (message.type === 'install') {
    try {
      const setUp = new Function('require', 'port', 'data', message.source);
      const stop = setUp(require, message.port, message.data);
      running.set(message.id, { port: message.port, stop });
    } catch (error) {
      message.port.close();
      parentPort.postMessage({ type: 'failed', id: message.id, reason: String((error && error.stack) || error) });
    }
  } else if (message.type === 'remove') {
    const service = running.get(message.id);
    running.delete(message.id);
    const stopped = service && typeof service.stop === 'function' ? Promise.resolve().then(service.stop) : Promise.resolve();
    stopped.catch(() => {}).then(() => {
      if (service) service.port.close();
      parentPort.postMessage({ type: 'removed', id: message.id });
    });
  }
});
`;
