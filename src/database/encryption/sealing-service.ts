import { installService, type HelperService } from '../../vocabulary/helper-thread.ts';
import type { SealedForm, StoredValue } from './keyring.ts';
import { bytesHeader, BYTES_FORMAT, IV_BYTES, IV_POOL_BYTES, STORED_TEXT_PREFIX, TAG_BYTES } from './sealed-format.ts';

/**
 * A service on the process's helper thread (threads/helper-thread.ts, shared with the
 * triggerer's watchdog and the /health endpoint) that seals and opens batches of values for a
 * Keyring (see keyring.ts), so that the ~3–5 µs of node:crypto each value costs is not spent on
 * the event loop: a triggerer claiming or firing 100,000 triggers would otherwise spend a second
 * of its one thread on it. Handing a batch over costs the loop 0.07–0.15 µs a value (copying the
 * strings there; sealed bytes come back as one buffer), though the triggerer benchmark shows
 * more than that: see the README.
 *
 * Its code is plain CommonJS, so the same text works from the sources and the built package;
 * the format's constants are written into it from sealed-format.ts. It writes both forms
 * Keyring.seal writes and reads what Keyring.open reads (test/process/encryption.test.ts checks each
 * opens the other's). A value it cannot open comes back as null: the Keyring opens that one
 * itself, to raise the error that names the row.
 *
 * It does not keep the process alive: its port is referenced only while a batch is out, and the
 * service is removed after IDLE_MS without a batch (the thread ends with its last service).
 */
export class SealingService {
  readonly #keys: readonly { readonly id: string; readonly bytes: Buffer }[];
  readonly #primaryId: string;
  /** Installed with the first batch, removed after IDLE_MS without one. */
  #service: HelperService | null = null;
  #idleTimer: NodeJS.Timeout | null = null;
  readonly #waiting = new Map<number, (results: (StoredValue | null)[] | null) => void>();
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

  /** Each value sealed with the primary key for `column`, in `form`; null if the thread failed meanwhile. */
  seal(values: readonly string[], column: string, form: SealedForm): Promise<(StoredValue | null)[] | null> {
    return this.#send('seal', values, column, form);
  }

  /**
   * Each sealed value opened, null where it did not open (unknown key, altered value); null for
   * the whole batch if the thread failed meanwhile.
   */
  open(values: readonly StoredValue[], column: string): Promise<(string | null)[] | null> {
    // A view into a larger buffer (Node's pool) would be copied whole into the message.
    const own = values.map((value) => (typeof value === 'string' || value.byteLength === value.buffer.byteLength ? value : new Uint8Array(value)));
    return this.#send('open', own, column, 'text') as Promise<(string | null)[] | null>;
  }

  #send(op: 'seal' | 'open', values: readonly StoredValue[], column: string, form: SealedForm): Promise<(StoredValue | null)[] | null> {
    let service: HelperService;
    try {
      if (this.#failed) return Promise.resolve(null);
      service = this.#started();
    } catch {
      this.#failed = true;
      return Promise.resolve(null);
    }
    if (this.#idleTimer) clearTimeout(this.#idleTimer);
    this.#idleTimer = null;
    const id = this.#nextId++;
    return new Promise((resolve) => {
      if (this.#waiting.size === 0) service.port.ref();
      this.#waiting.set(id, resolve);
      service.port.postMessage({ id, op, column, form, values });
    });
  }

  #started(): HelperService {
    if (this.#service) return this.#service;
    // Not expected (its code throws nothing), but should the thread die, nothing waits on it forever.
    const fail = () => {
      if (this.#service !== service) return;
      this.#failed = true;
      this.#service = null;
      this.#online = false;
      for (const waiter of this.#waiting.values()) waiter(null);
      this.#waiting.clear();
    };
    const service = installService({
      source: SEALING_SERVICE_SOURCE,
      // The bytes form's header comes built (sealed-format.ts): the service's text cannot import it.
      data: { keys: this.#keys, primaryId: this.#primaryId, header: bytesHeader(this.#primaryId) },
      onMessage: (message: { id: number; results: (StoredValue | null)[] } | { id: number; bytes: ArrayBuffer; ends: Uint32Array }) => {
        const id = message.id;
        if (id === READY_MESSAGE_ID) {
          if (this.#service === service) this.#online = true;
          return;
        }
        const waiter = this.#waiting.get(id);
        this.#waiting.delete(id);
        waiter?.('results' in message ? message.results : unpacked(message.bytes, message.ends));
        if (this.#waiting.size > 0) return;
        service.port.unref();
        this.#idleTimer = setTimeout(() => this.#stop(service), IDLE_MS);
        this.#idleTimer.unref();
      },
      onLost: fail,
    });
    // A service installed but never given a batch is removed as an idle one is.
    this.#idleTimer = setTimeout(() => this.#stop(service), IDLE_MS);
    this.#idleTimer.unref();
    this.#service = service;
    return service;
  }

  #stop(service: HelperService): void {
    if (this.#service !== service || this.#waiting.size > 0) return;
    this.#service = null;
    this.#online = false;
    void service.remove();
  }
}

/** Values sealed as bytes, as the thread sends them back: views of the one buffer they share. */
function unpacked(bytes: ArrayBuffer, ends: Uint32Array): Uint8Array[] {
  const values = new Array<Uint8Array>(ends.length);
  let start = 0;
  for (let i = 0; i < ends.length; i++) {
    values[i] = new Uint8Array(bytes, start, ends[i]! - start);
    start = ends[i]!;
  }
  return values;
}

/** What the thread sends, warmed up, before any batch: it takes batches at full speed from then on. */
const READY_MESSAGE_ID = 0;
/** Values it seals and opens to warm up when it starts. */
const WARM_UP_VALUES = 2000;

/**
 * A service idle this long is removed, and the helper thread ends with it unless it has other
 * services (a triggerer's watchdog); the next large batch installs it again (off the loop, which
 * does batches meanwhile). Long, because a thread started again at a mass firing costs the loop: the
 * first batches are sealed on it while the new thread starts, then the young thread is slow on
 * the core it shares with V8's collector. With 10 s (the triggerer benchmark fires 25 s after
 * loading) encryption cost SQLite's fire p99 +21.5%; with the thread still there, +14% (four
 * rounds each). What it keeps meanwhile is 10–20 MB.
 */
const IDLE_MS = 10 * 60_000;

/** The service's code: run in the helper thread as the body of `(require, port, data) => …`. */
const SEALING_SERVICE_SOURCE = `
'use strict';
const { createCipheriv, createDecipheriv, createSecretKey, randomFillSync } = require('node:crypto');
const PREFIX = ${JSON.stringify(STORED_TEXT_PREFIX)};
const BYTES_FORMAT = ${BYTES_FORMAT};
const IV_BYTES = ${IV_BYTES};
const TAG_BYTES = ${TAG_BYTES};
const IV_POOL_BYTES = ${IV_POOL_BYTES};
const READY_MESSAGE_ID = ${READY_MESSAGE_ID};
const WARM_UP_VALUES = ${WARM_UP_VALUES};
const keys = new Map(data.keys.map((key) => [key.id, createSecretKey(Buffer.from(key.bytes))]));
const primaryId = data.primaryId;
const primary = keys.get(primaryId);
let ivPool = Buffer.alloc(0);
let ivAt = 0;

function nextIv() {
  if (ivAt === ivPool.length) {
    ivPool = randomFillSync(Buffer.alloc(IV_POOL_BYTES));
    ivAt = 0;
  }
  const iv = ivPool.subarray(ivAt, ivAt + IV_BYTES);
  ivAt += IV_BYTES;
  return iv;
}

const header = Buffer.from(data.header);

function seal(json, aad, form) {
  const iv = nextIv();
  const cipher = createCipheriv('aes-256-gcm', primary, iv);
  cipher.setAAD(aad);
  const encrypted = cipher.update(json, 'utf8');
  cipher.final();
  if (form === 'text') return PREFIX + primaryId + ':' + Buffer.concat([iv, cipher.getAuthTag(), encrypted]).toString('base64') + '"';
  return Buffer.concat([header, iv, cipher.getAuthTag(), encrypted]);
}

/**
 * Values sealed as bytes, sent back as one buffer and where each ends: one buffer moved to the
 * loop, instead of one copied and allocated there for each value.
 */
function packed(sealed) {
  let total = 0;
  const ends = new Uint32Array(sealed.length);
  for (let i = 0; i < sealed.length; i++) ends[i] = total += sealed[i].length;
  const bytes = Buffer.allocUnsafeSlow(total);
  for (let i = 0; i < sealed.length; i++) sealed[i].copy(bytes, i === 0 ? 0 : ends[i - 1]);
  return { bytes: bytes.buffer, ends };
}

function open(stored, aad) {
  let key;
  let body;
  if (typeof stored === 'string') {
    if (!stored.startsWith(PREFIX)) return stored;
    const text = stored.slice(PREFIX.length, -1);
    const colon = text.indexOf(':');
    key = colon < 0 ? undefined : keys.get(text.slice(0, colon));
    body = key && Buffer.from(text.slice(colon + 1), 'base64');
  } else {
    const bytes = Buffer.from(stored.buffer, stored.byteOffset, stored.byteLength);
    if (bytes[0] !== BYTES_FORMAT || bytes.length < 2 + bytes[1] + IV_BYTES + TAG_BYTES) return null;
    key = keys.get(bytes.toString('latin1', 2, 2 + bytes[1]));
    body = bytes.subarray(2 + bytes[1]);
  }
  if (key === undefined) return null;
  try {
    const decipher = createDecipheriv('aes-256-gcm', key, body.subarray(0, IV_BYTES));
    decipher.setAAD(aad);
    decipher.setAuthTag(body.subarray(IV_BYTES, IV_BYTES + TAG_BYTES));
    const plain = decipher.update(body.subarray(IV_BYTES + TAG_BYTES));
    decipher.final();
    return plain.toString('utf8');
  } catch {
    return null;
  }
}

// Warmed up before it says it is ready: the first batch on a new thread loads node:crypto's
// internals (25 ms of the thread's first batch in a profile) and runs unoptimized code.
{
  const aad = Buffer.from('warm-up');
  for (let i = 0; i < WARM_UP_VALUES; i++) open(seal('{"warm":' + i + '}', aad, i % 2 ? 'text' : 'bytes'), aad);
}
port.postMessage({ id: READY_MESSAGE_ID });

port.on('message', ({ id, op, column, form, values }) => {
  const aad = Buffer.from(column);
  const results = new Array(values.length);
  for (let i = 0; i < values.length; i++) results[i] = op === 'seal' ? seal(values[i], aad, form) : open(values[i], aad);
  if (op === 'seal' && form === 'bytes') {
    const { bytes, ends } = packed(results);
    port.postMessage({ id, bytes, ends }, [bytes, ends.buffer]);
  } else {
    port.postMessage({ id, results });
  }
});
`;
