import { Worker } from 'node:worker_threads';

/**
 * A thread that seals and opens batches of values for a Keyring (see keyring.ts), so that the
 * ~5 µs of node:crypto each value costs is not spent on the event loop: a triggerer claiming or
 * firing 100,000 triggers would otherwise spend a second of its one thread on it. Handing a
 * batch over costs the loop ~0.5 µs a value (copying the strings both ways).
 *
 * Its code is plain CommonJS run with `eval`, so the same text works from the sources and the
 * built package. It writes the format Keyring.seal writes and reads what Keyring.open reads
 * (test/encryption.test.ts checks each opens the other's). A value it cannot open comes back as
 * null: the Keyring opens that one itself, to raise the error that names the row.
 *
 * The thread does not keep the process alive: it is referenced only while a batch is out, and it
 * ends after IDLE_MS without a batch.
 */
export class SealingThread {
  readonly #keys: readonly { readonly id: string; readonly bytes: Buffer }[];
  readonly #primaryId: string;
  /** Started with the first batch, ended after IDLE_MS without one (a thread holds 10–20 MB). */
  #worker: Worker | null = null;
  #idleTimer: NodeJS.Timeout | null = null;
  readonly #waiting = new Map<number, (results: (string | null)[] | null) => void>();
  /** Batch ids start after READY_MESSAGE_ID. */
  #nextId = READY_MESSAGE_ID + 1;
  #failed = false;
  #online = false;

  constructor(keys: readonly { readonly id: string; readonly bytes: Buffer }[], primaryId: string) {
    this.#keys = keys;
    this.#primaryId = primaryId;
  }

  /**
   * Whether a batch given now is served at once. If not, the caller does that batch itself,
   * which is quicker than waiting: a thread that is down is started, and takes batches once it
   * has warmed up (~30 ms and more on a busy machine).
   */
  accepting(): boolean {
    if (this.#failed) return false;
    try {
      this.#started();
    } catch {
      this.#failed = true;
      return false;
    }
    return this.#online;
  }

  /** Each value sealed with the primary key for `column`; null if the thread failed meanwhile. */
  seal(values: readonly string[], column: string): Promise<(string | null)[] | null> {
    return this.#send('seal', values, column);
  }

  /**
   * Each sealed value opened, null where it did not open (unknown key, altered value); null for
   * the whole batch if the thread failed meanwhile.
   */
  open(values: readonly string[], column: string): Promise<(string | null)[] | null> {
    return this.#send('open', values, column);
  }

  #send(op: 'seal' | 'open', values: readonly string[], column: string): Promise<(string | null)[] | null> {
    let worker: Worker;
    try {
      if (this.#failed) return Promise.resolve(null);
      worker = this.#started();
    } catch {
      this.#failed = true;
      return Promise.resolve(null);
    }
    if (this.#idleTimer) clearTimeout(this.#idleTimer);
    this.#idleTimer = null;
    const id = this.#nextId++;
    return new Promise((resolve) => {
      if (this.#waiting.size === 0) worker.ref();
      this.#waiting.set(id, resolve);
      worker.postMessage({ id, op, column, values });
    });
  }

  #started(): Worker {
    if (this.#worker) return this.#worker;
    const worker = new Worker(SEALING_THREAD_SOURCE, {
      eval: true,
      workerData: { keys: this.#keys, primaryId: this.#primaryId },
      // Its garbage is short-lived strings: a small young generation keeps the thread ~10 MB smaller.
      resourceLimits: { maxYoungGenerationSizeMb: 2 },
    });
    // A thread started but never given a batch ends as an idle one does.
    this.#idleTimer = setTimeout(() => this.#stop(worker), IDLE_MS);
    this.#idleTimer.unref();
    worker.unref();
    worker.on('message', ({ id, results }: { id: number; results: (string | null)[] }) => {
      if (id === READY_MESSAGE_ID) {
        if (this.#worker === worker) this.#online = true;
        return;
      }
      const waiter = this.#waiting.get(id);
      this.#waiting.delete(id);
      waiter?.(results);
      if (this.#waiting.size > 0) return;
      worker.unref();
      this.#idleTimer = setTimeout(() => this.#stop(worker), IDLE_MS);
      this.#idleTimer.unref();
    });
    // Not expected (its code throws nothing), but should it die, nothing waits on it forever.
    const fail = () => {
      if (this.#worker !== worker) return;
      this.#failed = true;
      this.#worker = null;
      this.#online = false;
      for (const waiter of this.#waiting.values()) waiter(null);
      this.#waiting.clear();
    };
    worker.on('error', fail);
    worker.on('exit', fail);
    this.#worker = worker;
    return worker;
  }

  #stop(worker: Worker): void {
    if (this.#worker !== worker || this.#waiting.size > 0) return;
    this.#worker = null;
    this.#online = false;
    void worker.terminate();
  }
}

/** What the thread sends, warmed up, before any batch: it takes batches at full speed from then on. */
const READY_MESSAGE_ID = 0;
/** Values it seals and opens to warm up when it starts. */
const WARM_UP_VALUES = 2000;

/**
 * A thread idle this long ends; the next large batch starts another (off the loop, which does
 * batches meanwhile). Long, because a thread started again at a mass firing costs the loop: the
 * first batches are sealed on it while the new thread starts, then the young thread is slow on
 * the core it shares with V8's collector. With 10 s (the triggerer benchmark fires 25 s after
 * loading) encryption cost SQLite's fire p99 +21.5%; with the thread still there, +14% (four
 * rounds each). What it keeps meanwhile is 10–20 MB.
 */
const IDLE_MS = 10 * 60_000;

const SEALING_THREAD_SOURCE = `
'use strict';
const { parentPort, workerData } = require('node:worker_threads');
const { createCipheriv, createDecipheriv, createSecretKey, randomFillSync } = require('node:crypto');
const PREFIX = '"dfenc1:';
const READY_MESSAGE_ID = ${READY_MESSAGE_ID};
const WARM_UP_VALUES = ${WARM_UP_VALUES};
const keys = new Map(workerData.keys.map((key) => [key.id, createSecretKey(Buffer.from(key.bytes))]));
const primaryId = workerData.primaryId;
const primary = keys.get(primaryId);
let ivPool = Buffer.alloc(0);
let ivAt = 0;

function nextIv() {
  if (ivAt === ivPool.length) {
    ivPool = randomFillSync(Buffer.alloc(12 * 4096));
    ivAt = 0;
  }
  const iv = ivPool.subarray(ivAt, ivAt + 12);
  ivAt += 12;
  return iv;
}

function seal(json, aad) {
  const iv = nextIv();
  const cipher = createCipheriv('aes-256-gcm', primary, iv);
  cipher.setAAD(aad);
  const encrypted = cipher.update(json, 'utf8');
  cipher.final();
  return PREFIX + primaryId + ':' + Buffer.concat([iv, cipher.getAuthTag(), encrypted]).toString('base64') + '"';
}

function open(stored, aad) {
  if (!stored.startsWith(PREFIX)) return stored;
  const body = stored.slice(PREFIX.length, -1);
  const colon = body.indexOf(':');
  const key = colon < 0 ? undefined : keys.get(body.slice(0, colon));
  if (key === undefined) return null;
  try {
    const bytes = Buffer.from(body.slice(colon + 1), 'base64');
    const decipher = createDecipheriv('aes-256-gcm', key, bytes.subarray(0, 12));
    decipher.setAAD(aad);
    decipher.setAuthTag(bytes.subarray(12, 28));
    return decipher.update(bytes.subarray(28), undefined, 'utf8') + decipher.final('utf8');
  } catch {
    return null;
  }
}

// Warmed up before it says it is ready: the first batch on a new thread loads node:crypto's
// internals (25 ms of the thread's first batch in a profile) and runs unoptimized code.
{
  const aad = Buffer.from('warm-up');
  for (let i = 0; i < WARM_UP_VALUES; i++) open(seal('{"warm":' + i + '}', aad), aad);
}
parentPort.postMessage({ id: READY_MESSAGE_ID });

parentPort.on('message', ({ id, op, column, values }) => {
  const aad = Buffer.from(column);
  const results = new Array(values.length);
  for (let i = 0; i < values.length; i++) results[i] = op === 'seal' ? seal(values[i], aad) : open(values[i], aad);
  parentPort.postMessage({ id, results });
});
`;
