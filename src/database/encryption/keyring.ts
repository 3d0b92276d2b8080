import { createCipheriv, createDecipheriv, createHmac, createSecretKey, randomBytes, randomFillSync, type KeyObject } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { EncryptionKeyError, InvalidOptionError } from '../../vocabulary/errors.ts';
import { bytesHeader, IV_BYTES, IV_POOL_BYTES, notSealedBytesError, sealedBytesParts, STORED_TEXT_PREFIX, TAG_BYTES } from './sealed-format.ts';
import { SealingService } from './sealing-service.ts';

/**
 * Encryption at rest of the values that may hold secrets: trigger kwargs, next_kwargs and event
 * payloads. The storage layer seals them as it writes and opens them as it reads, so nothing
 * above it sees ciphertext.
 *
 * A sealed value is stored in one of two forms (their layout: sealed-format.ts), text
 * ("dfenc1:<key id>:<base64>") or bytes.
 *
 * The text form is a JSON string, which PostgreSQL's jsonb columns require, and what trigger
 * kwargs and next_kwargs are everywhere. SQLite keeps a blob in a text column as it is, so there
 * an event payload is sealed as bytes (DialectAdapter.sealedEventForm): no base64, no prefix, 61
 * bytes instead of 87 for a 26-byte payload. A firing writes one per task instance, and SQLite's
 * write costs more the more bytes it stores: the 87-character form cost the event write 18%, the
 * bytes 7.5% (100,000 rows in batches of 2,000, nine interleaved rounds). Trigger kwargs stay
 * text: the triggerer reads them by the thousand, and a Buffer per value cost its claims more
 * than the shorter values saved (the benchmark's load +30% against +7%). Plain values are always
 * text, so a blob is a sealed value; every form opens in every column.
 *
 * The column it belongs to is the GCM associated data, so a sealed value copied into another
 * column does not open. Anything else is a value written in plain (before encryption was
 * switched on, or without keys) and reads as it is: plain kwargs and next_kwargs are JSON
 * objects, and no event payload deferflow writes in plain starts with the prefix either (a
 * payload that is a string beginning "dfenc1:" is the one value the text form cannot tell apart).
 *
 * Keys: `<id>:<base64 of 32 random bytes>` (`deferflow db generate-key`). The first key seals;
 * every key opens what it sealed, so a new key goes first and the old ones stay listed until
 * `deferflow db rotate-key` has re-sealed every row with the new one.
 */
export type SealedColumn =
  | 'trigger.kwargs'
  | 'task_instance.next_kwargs'
  | 'task_instance.next_event'
  | 'task_state.value'
  | 'trigger_member.outcome'
  | 'task_input.response';
/** The two forms a sealed value is stored in: see above. */
export type SealedForm = 'text' | 'bytes';
/** A value as a sealable column holds it: JSON text (plain, or sealed in text form), or sealed bytes. */
export type StoredValue = string | Uint8Array;

const KEY_ID = /^[A-Za-z0-9_-]{1,32}$/;
/** What a key's check value is the HMAC of (see keyChecks); a new label would make every recorded check value differ. */
const KEY_CHECK_LABEL = 'deferflow key check v1';
const KEY_BYTES = 32;
/**
 * Batches of at least this many values are sealed or opened on the sealing service; a smaller
 * one is done at once, cheaper than the thread's round trip (tens of µs).
 */
const THREAD_BATCH_VALUES = 64;

/**
 * Whether `json` is written as it is even with keys: empty kwargs. Sealing them would hide
 * nothing, since AES-GCM keeps a value's length and kwargs are always JSON objects, of which `{}`
 * is the only one of two characters; and they are what most deferrals carry (a defer() without
 * kwargs), where sealed they would take 55 bytes instead of 2 in every deferred row. That size
 * is not free: the encrypted triggerer benchmark fired 5% slower on SQLite with it (fire p50
 * 966 → 1,014 ms, p99 1,415 → 1,491 ms; six interleaved rounds).
 * An event payload or a task state value can be any JSON value, so an empty one is sealed like any other.
 */
function keptPlain(json: string, column: SealedColumn): boolean {
  return json === '{}' && (column === 'trigger.kwargs' || column === 'task_instance.next_kwargs');
}

interface Key {
  readonly id: string;
  readonly key: KeyObject;
  /** What a value sealed with it in bytes form starts with: the format, the id's length, the id. */
  readonly header: Buffer;
}

/** The encryption keys a process holds: the first seals new values, every one opens values sealed under its id. */
export class Keyring {
  /** No keys: values are written in plain; a sealed one cannot be read (EncryptionKeyError). */
  static readonly none = new Keyring([]);

  readonly #keys: ReadonlyMap<string, Key>;
  readonly #primary: Key | null;
  readonly #hashKey: KeyObject | null;
  #ivPool = Buffer.alloc(0);
  #ivAt = 0;
  /** Made at the first large batch. */
  #thread: SealingService | null = null;

  private constructor(keys: readonly Key[]) {
    this.#keys = new Map(keys.map((key) => [key.id, key]));
    this.#primary = keys[0] ?? null;
    // Trigger hashes (which let identical waits share a row) are keyed too: a plain sha256 of
    // kwargs would let whoever reads the table test guesses of a secret offline.
    this.#hashKey = this.#primary ? createSecretKey(createHmac('sha256', this.#primary.key).update('deferflow trigger hash').digest()) : null;
  }

  /**
   * The keys given as `id:base64` entries (the first seals), from `DEFERFLOW_ENCRYPTION_KEYS`
   * (comma-separated) and a keys file (one per line, `#` comments); `source` names where they
   * came from in errors. Refuses a malformed entry, a key that is not 32 bytes and a repeated id.
   */
  static fromEntries(entries: readonly string[], source: string): Keyring {
    const keys: Key[] = [];
    for (const [index, entry] of entries.entries()) {
      const colon = entry.indexOf(':');
      const id = colon < 0 ? '' : entry.slice(0, colon);
      const material = colon < 0 ? '' : entry.slice(colon + 1);
      const where = `${source}, key ${index + 1}${KEY_ID.test(id) ? ` (${id})` : ''}`;
      if (!KEY_ID.test(id)) {
        throw new InvalidOptionError(
          source,
          `key ${index + 1} is not ID:BASE64 with an ID of letters, digits, _ or - (at most 32); make one with \`deferflow db generate-key --id ID\``,
        );
      }
      const bytes = Buffer.from(material, 'base64');
      if (bytes.length !== KEY_BYTES || bytes.toString('base64') !== material) {
        throw new InvalidOptionError(
          where,
          `expected ${KEY_BYTES} bytes in base64 (44 characters), got ${material.length} characters; make one with \`deferflow db generate-key\``,
        );
      }
      if (keys.some((key) => key.id === id)) throw new InvalidOptionError(where, `the id ${id} is given twice; every key needs its own id`);
      keys.push({ id, key: createSecretKey(bytes), header: bytesHeader(id) });
    }
    return keys.length === 0 ? Keyring.none : new Keyring(keys);
  }

  /**
   * The keyring of a process: the `keys` given (from DEFERFLOW_ENCRYPTION_KEYS, or the embedded
   * API's encryptionKeys) followed by those in `keysFile` (one a line, `#` comments). With
   * neither, Keyring.none.
   */
  static load(keys: readonly string[], keysFile: string | undefined, fileOption = 'encryption-keys-file', keysOption = 'DEFERFLOW_ENCRYPTION_KEYS'): Keyring {
    const entries = [...keys];
    if (keysFile) {
      let text: string;
      try {
        text = readFileSync(keysFile, 'utf8');
      } catch (error) {
        throw new InvalidOptionError(fileOption, `cannot read the keys file ${keysFile}: ${(error as Error).message}`);
      }
      const fromFile = text
        .replace(/#.*$/gm, '')
        .split(/\r?\n/)
        .map((entry) => entry.trim())
        .filter((entry) => entry !== '');
      if (fromFile.length === 0)
        throw new InvalidOptionError(fileOption, `the keys file ${keysFile} holds no key; add one made by \`deferflow db generate-key\``);
      entries.push(...fromFile);
    }
    return Keyring.fromEntries(entries, keys.length > 0 && keysFile ? `${keysOption} and ${fileOption}` : keysFile ? fileOption : keysOption);
  }

  /** A new key entry, `id:base64`, from the CSPRNG. */
  static generateEntry(id: string): string {
    if (!KEY_ID.test(id)) throw new InvalidOptionError('id', `expected letters, digits, _ or - (at most 32), got ${JSON.stringify(id)}`);
    return `${id}:${randomBytes(KEY_BYTES).toString('base64')}`;
  }

  /** Whether values are sealed as they are written. */
  get encrypting(): boolean {
    return this.#primary !== null;
  }

  /** The id of the key that seals, or null. */
  get primaryKeyId(): string | null {
    return this.#primary?.id ?? null;
  }

  /** The key ids, the sealing one first (never the keys themselves). */
  get keyIds(): string[] {
    return [...this.#keys.keys()];
  }

  /**
   * Each key's check value, the sealing key first: an HMAC-SHA256 of a fixed label under the key.
   * The database records it the first time it meets an id, so a process holding other material
   * under a known id is refused before it writes (storage/encryption-keys.ts). It tells only
   * whether two keys are equal: HMAC does not give up its key, and nothing sealed opens with it.
   */
  keyChecks(): { readonly id: string; readonly check: string }[] {
    return [...this.#keys.values()].map(({ id, key }) => ({ id, check: createHmac('sha256', key).update(KEY_CHECK_LABEL).digest('base64') }));
  }

  /** Logged configs show which keys, never their bytes. */
  toJSON(): { keys: string[] } {
    return { keys: this.keyIds };
  }

  /**
   * `json` as it is stored in `column`: sealed with the first key, in `form` (text unless the
   * database stores bytes); as it is without keys, or if kept plain (keptPlain).
   */
  seal(json: string, column: SealedColumn): string;
  /** `json` as stored in a column of the given form (text or bytes). */
  seal(json: string, column: SealedColumn, form: SealedForm): StoredValue;
  seal(json: string, column: SealedColumn, form: SealedForm = 'text'): StoredValue {
    const primary = this.#primary;
    if (primary === null || keptPlain(json, column)) return json;
    const iv = this.#nextIv();
    const cipher = createCipheriv('aes-256-gcm', primary.key, iv);
    cipher.setAAD(Buffer.from(column));
    const encrypted = cipher.update(json, 'utf8');
    cipher.final();
    if (form === 'bytes') return Buffer.concat([primary.header, iv, cipher.getAuthTag(), encrypted]);
    return `${STORED_TEXT_PREFIX}${primary.id}:${Buffer.concat([iv, cipher.getAuthTag(), encrypted]).toString('base64')}"`;
  }

  /**
   * The JSON text of a value as read from `column`: opened if sealed (in either form), else as it
   * is. `row` names the row in the error (`trigger 12`); EncryptionKeyError when the key it was
   * sealed with is not in this keyring, or the value does not open with it (another key of the
   * same id, or an altered value).
   */
  open(stored: StoredValue, column: SealedColumn, row: string): string {
    if (typeof stored === 'string') {
      if (!stored.startsWith(STORED_TEXT_PREFIX)) return stored;
      const body = stored.slice(STORED_TEXT_PREFIX.length, -1);
      const colon = body.indexOf(':');
      return this.#openSealed(body.slice(0, colon), colon < 0 ? null : Buffer.from(body.slice(colon + 1), 'base64'), column, row);
    }
    const parts = sealedBytesParts(stored);
    if (parts === null) throw notSealedBytesError(stored, `${row}: its ${column}`);
    return this.#openSealed(parts.keyId, parts.body, column, row);
  }

  /** `body` (iv | tag | ciphertext) opened with key `keyId`; null body: the value names no key. */
  #openSealed(keyId: string, body: Buffer | null, column: SealedColumn, row: string): string {
    const key = this.#keys.get(keyId);
    if (body === null || key === undefined) {
      throw new EncryptionKeyError(
        `${row}: its ${column} is encrypted with key ${JSON.stringify(keyId)}, which is not among this process's keys ` +
          `(${this.#keys.size === 0 ? 'none configured' : this.keyIds.join(', ')}); give every daemon the same keys (DEFERFLOW_ENCRYPTION_KEYS or --encryption-keys-file)`,
      );
    }
    try {
      const decipher = createDecipheriv('aes-256-gcm', key.key, body.subarray(0, IV_BYTES));
      decipher.setAAD(Buffer.from(column));
      decipher.setAuthTag(body.subarray(IV_BYTES, IV_BYTES + TAG_BYTES));
      // Bytes out, decoded once after the tag checked: asking update and final for text would
      // make a string decoder for each value (~0.2 of the ~2.7 µs an open costs).
      const plain = decipher.update(body.subarray(IV_BYTES + TAG_BYTES));
      decipher.final();
      return plain.toString('utf8');
    } catch {
      throw new EncryptionKeyError(
        `${row}: its ${column} does not decrypt with key ${JSON.stringify(keyId)}: that key is not the one it was written with, or the row was altered; ` +
          'check that every daemon has the same key under that id',
      );
    }
  }

  /**
   * `seal` for a batch. A large one is sealed on the sealing service, so the event loop stays free
   * meanwhile (a batch prepared ahead of a write overlaps the write before it).
   */
  async sealMany(jsons: readonly string[], column: SealedColumn, form: SealedForm = 'text'): Promise<StoredValue[]> {
    if (this.#primary === null) return [...jsons];
    const toSeal = jsons.filter((json) => !keptPlain(json, column));
    const thread = this.#threadFor(toSeal.length);
    const sealed = thread ? await thread.seal(toSeal, column, form) : null;
    // In order: each value not kept plain takes the next of the thread's; what the thread did not
    // seal (none of it, if it failed meanwhile) is sealed here.
    let next = 0;
    return jsons.map((json) => (keptPlain(json, column) ? json : (sealed?.[next++] ?? this.seal(json, column, form))));
  }

  /**
   * `open` for a batch, with the error in place of each value that does not open (so one bad row
   * does not fail the others); `rowName(i)` names the row of `stored[i]` in that error. Plain
   * values come back as they are; many sealed ones are opened on the sealing service.
   */
  async openMany(stored: readonly StoredValue[], column: SealedColumn, rowName: (index: number) => string): Promise<(string | EncryptionKeyError)[]> {
    const results: (StoredValue | EncryptionKeyError)[] = [...stored];
    const sealedAt = stored.flatMap((value, index) => (typeof value !== 'string' || value.startsWith(STORED_TEXT_PREFIX) ? [index] : []));
    const thread = this.#threadFor(sealedAt.length);
    const opened = thread
      ? await thread.open(
          sealedAt.map((index) => stored[index]!),
          column,
        )
      : null;
    sealedAt.forEach((index, k) => {
      const value = opened?.[k];
      if (typeof value === 'string') {
        results[index] = value;
        return;
      }
      // Not opened there (or no thread): opened here, which says why it does not open.
      try {
        results[index] = this.open(stored[index]!, column, rowName(index));
      } catch (error) {
        if (!(error instanceof EncryptionKeyError)) throw error;
        results[index] = error;
      }
    });
    // Every value left as it was is plain text.
    return results as (string | EncryptionKeyError)[];
  }

  /** The key id a stored value is sealed with, or null for a plain value. */
  static sealedWith(stored: StoredValue): string | null {
    if (typeof stored !== 'string') return sealedBytesParts(stored)?.keyId ?? null;
    if (!stored.startsWith(STORED_TEXT_PREFIX)) return null;
    const colon = stored.indexOf(':', STORED_TEXT_PREFIX.length);
    return colon < 0 ? null : stored.slice(STORED_TEXT_PREFIX.length, colon);
  }

  /**
   * A stored value in text form: a value sealed in bytes written as the same value in text (the
   * IV, tag and ciphertext unchanged), anything else as it is. For a database that stores text.
   */
  static textForm(stored: StoredValue): string {
    if (typeof stored === 'string') return stored;
    const parts = sealedBytesParts(stored);
    if (parts === null) throw notSealedBytesError(stored);
    return `${STORED_TEXT_PREFIX}${parts.keyId}:${parts.body.toString('base64')}"`;
  }

  /** The trigger hash as stored: keyed with the sealing key, or as it is without keys. */
  triggerHash(hash: string): string {
    return this.#hashKey === null ? hash : createHmac('sha256', this.#hashKey).update(hash).digest('hex');
  }

  /** The sealing service (on the helper thread), for a batch of `values` values large enough to be worth its round trip and when it takes batches; else null (the batch is done here). */
  #threadFor(values: number): SealingService | null {
    return values >= THREAD_BATCH_VALUES ? this.#sealingService() : null;
  }

  #sealingService(): SealingService | null {
    const primary = this.#primary;
    if (primary === null) return null;
    this.#thread ??= new SealingService(
      [...this.#keys.values()].map((key) => ({ id: key.id, bytes: key.key.export() })),
      primary.id,
    );
    // While it starts or warms up, batches are done on the loop rather than waiting for it. A
    // thread that failed once is not tried again: batches are then done on the loop.
    return this.#thread.accepting() ? this.#thread : null;
  }

  #nextIv(): Buffer {
    // GCM must never see one IV twice under a key: 96 random bits per value, as NIST SP 800-38D
    // allows for up to 2^32 values per key; rotate keys long before that.
    if (this.#ivAt === this.#ivPool.length) {
      this.#ivPool = randomFillSync(Buffer.alloc(IV_POOL_BYTES));
      this.#ivAt = 0;
    }
    const iv = this.#ivPool.subarray(this.#ivAt, this.#ivAt + IV_BYTES);
    this.#ivAt += IV_BYTES;
    return iv;
  }
}
