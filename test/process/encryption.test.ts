// Encryption at rest: trigger kwargs, next_kwargs and event payloads sealed with AES-256-GCM,
// keys rotated with `deferflow db rotate-key`, and a missing or wrong key failing only its rows.
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import pino from 'pino';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import {
  BaseOperator,
  BaseTrigger,
  createTaskInstance,
  deferflow,
  deferTaskInstance,
  Keyring,
  openDatabase,
  readTaskInstance,
  resumeTaskInstance,
  TaskDeferred,
  TriggerEvent,
  type Database,
  type Deferflow,
  type SerializedTrigger,
  type TaskContext,
} from '../../src/index.ts';
import { resolveDeferflowConfig } from '../../src/internals.ts';
import { migrateToLatest } from '../../src/database/migrate.ts';
import { resolveStandaloneOptions } from '../../src/app/standalone/options.ts';
import { openStores } from '../../src/storage/index.ts';
import { SealingService } from '../../src/database/encryption/sealing-service.ts';
import { TRIGGER_FAILURE_METHOD } from '../../src/storage/context.ts';
import { triggerHash } from '../../src/authoring/triggers/base-trigger.ts';
import { EchoTrigger } from '../fixtures/custom-trigger-module.ts';
import { dropTestDatabases, freshDatabaseUrl, testDialects } from '../support/databases.ts';
import { parsePlain, waitFor } from '../support/fixtures.ts';
import type { SealableJson } from '../../src/database/schema.ts';
import { PACKAGE_ENTRY, spawnDeferflow } from '../support/processes.ts';
import { processScratch } from '../support/process-scratch.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();

/** Runs `deferflow ARGS` (the built binary) to its exit. */
async function runCli(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const proc = spawnDeferflow(args, env);
  const exit = await proc.exit;
  return { code: exit.code, stdout: proc.text.join('\n'), stderr: proc.stderr.join('\n') };
}

const K1 = Keyring.generateEntry('k1');
const K2 = Keyring.generateEntry('k2');
const GONE = Keyring.generateEntry('gone');
/** Same id as K1, other bytes: what a daemon given the wrong key file would hold. */
const K1_IMPOSTOR = Keyring.generateEntry('k1');

function thrownBy(action: () => unknown): { code?: string; message: string } {
  try {
    action();
  } catch (error) {
    return error as { code?: string; message: string };
  }
  throw new Error('expected a throw');
}

describe('Keyring', () => {
  it('seals JSON into a JSON string bound to its column, and opens it again; plain values read as they are', () => {
    const keyring = Keyring.fromEntries([K1], 'test');
    const sealed = keyring.seal('{"password":"hunter2"}', 'trigger.kwargs');
    expect(JSON.parse(sealed)).toMatch(/^dfenc1:k1:[A-Za-z0-9+/=]+$/);
    expect(sealed).not.toContain('hunter2');
    // A fresh IV each time: equal values do not look equal at rest.
    expect(keyring.seal('{"password":"hunter2"}', 'trigger.kwargs')).not.toBe(sealed);
    expect(keyring.open(sealed, 'trigger.kwargs', 'trigger 1')).toBe('{"password":"hunter2"}');
    expect(keyring.open('{"plain":true}', 'trigger.kwargs', 'trigger 1')).toBe('{"plain":true}');
    // Copied into another column, it does not open.
    expect(thrownBy(() => keyring.open(sealed, 'task_instance.next_kwargs', 'task instance 9'))).toMatchObject({ code: 'DF_ENCRYPTION_KEY' });
    expect(Keyring.sealedWith(sealed)).toBe('k1');
    expect(Keyring.sealedWith('{"plain":true}')).toBeNull();
    // Logged configs name the keys, never their bytes.
    expect(JSON.stringify({ keyring })).toBe('{"keyring":{"keys":["k1"]}}');
  });

  it('seals into bytes for a database that keeps blobs: shorter, same key and column binding; other bytes are named, not opened', () => {
    const keyring = Keyring.fromEntries([K1, K2], 'test');
    const json = '"2026-11-25T02:09:27.000Z"';
    const sealed = keyring.seal(json, 'task_instance.next_event', 'bytes') as Uint8Array;
    expect(sealed).toBeInstanceOf(Uint8Array);
    // Format byte, id length, id, IV, tag, ciphertext: no base64, no prefix.
    expect(sealed.byteLength).toBe(json.length + 2 + 'k1'.length + 12 + 16);
    expect(sealed.byteLength).toBeLessThan(keyring.seal(json, 'task_instance.next_event').length - 20);
    expect(Buffer.from(sealed).toString('latin1')).not.toContain('2026');
    expect(Keyring.sealedWith(sealed)).toBe('k1');
    expect(keyring.open(sealed, 'task_instance.next_event', 'task instance 1')).toBe(json);
    // A copy of the bytes opens too (a driver hands back its own buffer).
    expect(keyring.open(new Uint8Array(sealed), 'task_instance.next_event', 'task instance 1')).toBe(json);
    expect(thrownBy(() => keyring.open(sealed, 'task_instance.next_kwargs', 'task instance 1')).message).toContain(
      'task instance 1: its task_instance.next_kwargs does not decrypt with key "k1"',
    );
    expect(thrownBy(() => Keyring.fromEntries([K2], 'test').open(sealed, 'task_instance.next_event', 'task instance 1')).message).toContain(
      'is encrypted with key "k1", which is not among this process\'s keys (k2)',
    );
    // The same value in text form (what a database storing text gets, should bytes reach it) opens alike.
    const asText = Keyring.textForm(sealed);
    expect(JSON.parse(asText)).toMatch(/^dfenc1:k1:[A-Za-z0-9+/=]+$/);
    expect(keyring.open(asText, 'task_instance.next_event', 'task instance 1')).toBe(json);
    expect(Keyring.textForm('{"plain":true}')).toBe('{"plain":true}');
    // Empty kwargs stay plain text in either form.
    expect(keyring.seal('{}', 'trigger.kwargs', 'bytes')).toBe('{}');
    // Bytes of another format (a newer deferflow's, or altered): named, with what to do.
    const foreign = Buffer.from(sealed);
    foreign[0] = 2;
    expect(Keyring.sealedWith(foreign)).toBeNull();
    expect(thrownBy(() => keyring.open(foreign, 'task_instance.next_event', 'task instance 7'))).toMatchObject({
      code: 'DF_ENCRYPTION_KEY',
      message: expect.stringContaining(
        `task instance 7: its task_instance.next_event holds ${sealed.byteLength} bytes that are not a value deferflow sealed (format byte 2`,
      ),
    });
    expect(thrownBy(() => keyring.open(sealed.subarray(0, 20), 'task_instance.next_event', 'task instance 7')).message).toContain('20 bytes that are not');
  });

  it('names the row and the key when a value cannot be opened: a key not configured, or another key under the same id', () => {
    const sealed = Keyring.fromEntries([K1], 'test').seal('{}', 'task_instance.next_event');
    const missing = thrownBy(() => Keyring.fromEntries([K2], 'test').open(sealed, 'task_instance.next_event', 'task instance 12'));
    expect(missing.code).toBe('DF_ENCRYPTION_KEY');
    expect(missing.message).toContain(
      'task instance 12: its task_instance.next_event is encrypted with key "k1", which is not among this process\'s keys (k2)',
    );
    expect(thrownBy(() => Keyring.none.open(sealed, 'task_instance.next_event', 'task instance 12')).message).toContain('(none configured)');
    const wrong = thrownBy(() => Keyring.fromEntries([K1_IMPOSTOR], 'test').open(sealed, 'task_instance.next_event', 'task instance 12'));
    expect(wrong.message).toContain('task instance 12: its task_instance.next_event does not decrypt with key "k1"');
  });

  it('the sealing service writes what Keyring.open reads and reads what Keyring.seal writes; a value it cannot open comes back null', async () => {
    const keyring = Keyring.fromEntries([K1, K2], 'test');
    const [id1, base64] = K1.split(':') as [string, string];
    const [id2, base64b] = K2.split(':') as [string, string];
    const thread = new SealingService(
      [
        { id: id1, bytes: Buffer.from(base64, 'base64') },
        { id: id2, bytes: Buffer.from(base64b, 'base64') },
      ],
      'k1',
    );
    const values = Array.from({ length: 100 }, (_, i) => JSON.stringify({ n: i, secret: `s${i}` }));
    for (const form of ['text', 'bytes'] as const) {
      const sealed = (await thread.seal(values, 'trigger.kwargs', form))!;
      expect(sealed.every((value) => (typeof value === 'string' ? 'text' : 'bytes') === form)).toBe(true);
      expect(sealed.every((value) => Keyring.sealedWith(value!) === 'k1' && !Buffer.from(value!).toString('latin1').includes('secret'))).toBe(true);
      expect(sealed.map((value, i) => keyring.open(value!, 'trigger.kwargs', `trigger ${i}`))).toEqual(values);
      const mixed = [
        keyring.seal(values[0]!, 'trigger.kwargs', form),
        '{"plain":1}',
        sealed[1]!,
        Keyring.fromEntries([GONE], 'test').seal('{"n":1}', 'trigger.kwargs', form),
      ];
      const wrongColumn = keyring.seal('{"n":1}', 'task_instance.next_event', form);
      const impostor = Keyring.fromEntries([K1_IMPOSTOR], 'test').seal('{"n":1}', 'trigger.kwargs', form);
      expect(await thread.open([...mixed, wrongColumn, impostor], 'trigger.kwargs')).toEqual([values[0], '{"plain":1}', values[1], null, null, null]);
    }
  });

  it('a sealing service takes batches only once installed and warmed up, and opens what it sealed', async () => {
    const [id, base64] = K1.split(':') as [string, string];
    const thread = new SealingService([{ id, bytes: Buffer.from(base64, 'base64') }], id);
    // Starting takes tens of ms: a caller told no does its batch itself.
    expect(thread.accepting()).toBe(false);
    await waitFor(() => thread.accepting(), { what: 'the sealing service to take batches', timeoutMs: 10_000 });
    const values = Array.from({ length: 100 }, (_, i) => JSON.stringify({ n: i }));
    const sealed = (await thread.seal(values, 'task_instance.next_event', 'bytes'))!;
    expect(await thread.open(sealed as Uint8Array[], 'task_instance.next_event')).toEqual(values);
  });

  it('seals and opens batches in order, large ones off the event loop, with an error in place of each value that does not open', async () => {
    const keyring = Keyring.fromEntries([K1], 'test');
    for (const [size, form] of [
      [3, 'text'],
      [300, 'text'],
      [3, 'bytes'],
      [300, 'bytes'],
    ] as const) {
      const values = Array.from({ length: size }, (_, i) => JSON.stringify({ n: i }));
      const sealed = await keyring.sealMany(values, 'task_instance.next_event', form);
      expect(sealed.every((value) => (typeof value === 'string' ? 'text' : 'bytes') === form)).toBe(true);
      expect(new Set(sealed.map((value) => Buffer.from(value).toString('base64'))).size).toBe(size);
      expect(sealed.map((value) => keyring.open(value, 'task_instance.next_event', 'x'))).toEqual(values);
      const stored = [...sealed];
      stored[1] = Keyring.fromEntries([GONE], 'test').seal('{}', 'task_instance.next_event', form);
      stored[2] = '{"plain":true}';
      const opened = await keyring.openMany(stored, 'task_instance.next_event', (index) => `task instance ${index + 100}`);
      expect(opened[0]).toBe(values[0]);
      expect(opened[1]).toMatchObject({
        code: 'DF_ENCRYPTION_KEY',
        message: expect.stringContaining('task instance 101: its task_instance.next_event is encrypted with key "gone"'),
      });
      expect(opened[2]).toBe('{"plain":true}');
      expect(opened.slice(3)).toEqual(values.slice(3));
    }
    expect(await Keyring.none.sealMany(['{}'], 'trigger.kwargs')).toEqual(['{}']);
  });

  it('keeps empty kwargs plain (their ciphertext would say no more) and seals an empty event payload, one at a time and in batches', async () => {
    const keyring = Keyring.fromEntries([K1], 'test');
    expect(keyring.seal('{}', 'trigger.kwargs')).toBe('{}');
    expect(keyring.seal('{}', 'task_instance.next_kwargs')).toBe('{}');
    expect(Keyring.sealedWith(keyring.seal('{}', 'task_instance.next_event'))).toBe('k1');
    expect(Keyring.sealedWith(keyring.seal('{"a":1}', 'task_instance.next_kwargs'))).toBe('k1');
    // A batch large enough for the sealing service, empty and non-empty kwargs mixed.
    const values = Array.from({ length: 300 }, (_, i) => (i % 3 === 0 ? '{}' : JSON.stringify({ n: i })));
    const stored = await keyring.sealMany(values, 'task_instance.next_kwargs');
    expect(stored.map((value, i) => (i % 3 === 0 ? value : Keyring.sealedWith(value)))).toEqual(values.map((_, i) => (i % 3 === 0 ? '{}' : 'k1')));
    expect((await keyring.openMany(stored, 'task_instance.next_kwargs', String)) as string[]).toEqual(values);
    const events = await keyring.sealMany(values, 'task_instance.next_event');
    expect(events.every((value) => Keyring.sealedWith(value) === 'k1')).toBe(true);
  });

  it('refuses malformed keys by position and says how to make one; reads a keys file with comments, the first key sealing', () => {
    expect(thrownBy(() => Keyring.fromEntries(['k1'], 'DEFERFLOW_ENCRYPTION_KEYS')).message).toContain('DEFERFLOW_ENCRYPTION_KEYS: key 1 is not ID:BASE64');
    expect(thrownBy(() => Keyring.fromEntries([K1, 'k2:c2hvcnQ='], 'keys.txt')).message).toContain(
      'keys.txt, key 2 (k2): expected 32 bytes in base64 (44 characters), got 8 characters; make one with `deferflow db generate-key`',
    );
    expect(thrownBy(() => Keyring.fromEntries([K1, K1_IMPOSTOR], 'keys.txt')).message).toContain('the id k1 is given twice');
    const file = path.join(scratch.dir('keys'), 'keys.txt');
    writeFileSync(file, `# rotated 2026-11-24\n${K2}\n\n${K1}  # the old one\n`);
    const keyring = Keyring.load([], file);
    expect(keyring.keyIds).toEqual(['k2', 'k1']);
    expect(keyring.primaryKeyId).toBe('k2');
    writeFileSync(file, '# nothing yet\n');
    expect(thrownBy(() => Keyring.load([], file)).message).toContain(`the keys file ${file} holds no key`);
    expect(thrownBy(() => Keyring.load([], path.join(path.dirname(file), 'missing.txt'))).message).toContain('encryption-keys-file: cannot read the keys file');
  });

  it('are loaded once for a process running several components: standalone and an embedded config give each the same keys', () => {
    const file = path.join(scratch.dir('keys-once'), 'keys.txt');
    writeFileSync(file, `${K2}\n${K1}\n`);
    const standalone = resolveStandaloneOptions({ encryptionKeysFile: file }, {});
    expect(standalone.worker.keyring.keyIds).toEqual(['k2', 'k1']);
    expect(standalone.scheduler.keyring).toBe(standalone.worker.keyring);
    expect(standalone.triggerer.keyring).toBe(standalone.worker.keyring);
    // Embedded: the components hold the app's keyring, not one of their own without keys.
    const embedded = resolveDeferflowConfig({ encryptionKeys: [K1] });
    expect(embedded.keyring.keyIds).toEqual(['k1']);
    for (const component of [embedded.worker!, embedded.scheduler!, embedded.triggerer!]) expect(component.keyring).toBe(embedded.keyring);
  });
});

class Shout extends BaseOperator {
  override execute(): never {
    return this.defer({ trigger: new EchoTrigger({ message: 'hunter2-event' }), method: 'heard', kwargs: { token: 'hunter2-kwarg' } });
  }
  heard(_context: TaskContext, event: string, kwargs: { token: string }) {
    return `${event}/${kwargs.token}`;
  }
}

/** A trigger without kwargs, firing at once. */
class QuietTrigger extends BaseTrigger {
  static readonly classpath = 'test.QuietTrigger';
  serialize(): SerializedTrigger {
    return { classpath: QuietTrigger.classpath, kwargs: {} };
  }
  async *run(): AsyncGenerator<TriggerEvent<string>> {
    yield new TriggerEvent('quiet');
  }
}

/** Defers with no kwargs onto a trigger with none. */
class Quiet extends BaseOperator {
  override execute(): never {
    return this.defer({ trigger: new QuietTrigger(), method: 'heard' });
  }
}

/** The deferral an operator makes, as a worker records it. */
function deferralOf(operator: { execute(): never }): TaskDeferred {
  try {
    operator.execute();
  } catch (thrown) {
    return thrown as TaskDeferred;
  }
  throw new Error(`${operator.constructor.name} did not defer`);
}

/** The deferral Shout makes. */
function shoutDeferral(): TaskDeferred {
  return deferralOf(new Shout({ taskId: 'shout' }));
}

async function deferredShout(database: Database, runId: string): Promise<number> {
  const id = await createTaskInstance(database, { dagId: 'secrets', taskId: 'shout', runId });
  await deferTaskInstance(database, id, shoutDeferral());
  return id;
}

/**
 * The key a stored value is sealed with, checking its form: an event's is the one `database`
 * stores events in (bytes on SQLite, a JSON string on PostgreSQL), any other value's is text.
 */
function sealedKeyOf(database: Database, value: SealableJson | null | undefined, column: 'event' | 'other' = 'other'): string | null {
  if (value === null || value === undefined) throw new Error('expected a stored value, found none');
  expect(typeof value === 'string' ? 'text' : 'bytes').toBe(column === 'event' ? database.adapter.sealedEventForm : 'text');
  return Keyring.sealedWith(value);
}

/** What someone reading the table sees of a stored value. */
function seenAtRest(value: SealableJson | null): string {
  return value === null || typeof value === 'string' ? String(value) : Buffer.from(value).toString('latin1');
}

async function rawRows(database: Database, id: number) {
  const ti = await database.db
    .selectFrom('task_instance')
    .select(['next_kwargs', 'next_event', 'trigger_id', 'state', 'next_method'])
    .where('id', '=', id)
    .executeTakeFirstOrThrow();
  const trigger =
    ti.trigger_id === null ? null : await database.db.selectFrom('trigger').select(['kwargs', 'hash']).where('id', '=', ti.trigger_id).executeTakeFirst();
  return { ti, trigger };
}

describe.each(testDialects)('encryption at rest on %s', (dialect) => {
  const open: Database[] = [];
  let app: Deferflow | null = null;
  afterEach(async () => {
    await app?.stop();
    app = null;
    for (const database of open.splice(0)) await database.close();
  });

  async function databases(url: string, ...keys: string[][]): Promise<Database[]> {
    const handles = keys.map((entries) => openDatabase(url, { keyring: Keyring.fromEntries(entries, 'test') }));
    open.push(...handles);
    await migrateToLatest(handles[0]!);
    return handles;
  }

  function triggererApp(databaseUrl: string, encryptionKeys: string[]): Promise<Deferflow> {
    return deferflow({
      databaseUrl,
      worker: false,
      scheduler: false,
      triggerer: { pollInterval: 0.1, triggerClasses: [EchoTrigger, QuietTrigger] },
      logger: pino({ level: 'silent' }),
      encryptionKeys,
    });
  }

  it('stores kwargs, next_kwargs and events sealed, with no secret in the rows; rows written in plain before still read', async () => {
    const url = await freshDatabaseUrl(dialect);
    const [plain, sealed] = await databases(url, [], [K1]);
    const before = await deferredShout(plain!, 'before');
    const id = await deferredShout(sealed!, 'after');

    const old = await rawRows(plain!, before);
    expect(old.trigger!.kwargs).toContain('hunter2-event');
    expect(old.ti.next_kwargs).toContain('hunter2-kwarg');
    const raw = await rawRows(plain!, id);
    for (const value of [raw.trigger!.kwargs, raw.ti.next_kwargs!]) {
      expect(sealedKeyOf(plain!, value)).toBe('k1');
      expect(seenAtRest(value)).not.toContain('hunter2');
    }
    // The shared-wait hash is keyed: the plain sha256 of the kwargs is nowhere in the table.
    const plainHash = triggerHash(shoutDeferral().serializedTrigger);
    expect(old.trigger!.hash).toBe(plainHash);
    expect(raw.trigger!.hash).toMatch(/^[0-9a-f]{64}$/);
    expect(raw.trigger!.hash).not.toBe(plainHash);
    // Identical waits still share a row under the same key.
    const twin = await deferredShout(sealed!, 'twin');
    expect((await rawRows(plain!, twin)).ti.trigger_id).toBe(raw.ti.trigger_id);
    // A deferral without kwargs: its empty next_kwargs and trigger kwargs are stored as they are.
    const quiet = await createTaskInstance(sealed!, { dagId: 'secrets', taskId: 'quiet', runId: 'quiet' });
    await deferTaskInstance(sealed!, quiet, deferralOf(new Quiet({ taskId: 'quiet' })));
    const quietRaw = await rawRows(plain!, quiet);
    expect([quietRaw.ti.next_kwargs, quietRaw.trigger!.kwargs].map((value) => parsePlain(value!))).toEqual([{}, {}]);

    app = await triggererApp(url, [K1]);
    for (const ti of [before, id, twin, quiet]) {
      await waitFor(async () => (await readTaskInstance(sealed!, ti))?.state === 'scheduled', { what: `task instance ${ti} resumed` });
    }
    const fired = await rawRows(plain!, id);
    expect(sealedKeyOf(plain!, fired.ti.next_event, 'event')).toBe('k1');
    expect(seenAtRest(fired.ti.next_event)).not.toContain('hunter2');
    // The plain row's event is written by a triggerer with keys: sealed too.
    expect(sealedKeyOf(plain!, (await rawRows(plain!, before)).ti.next_event, 'event')).toBe('k1');

    expect(sealedKeyOf(plain!, (await rawRows(plain!, quiet)).ti.next_event, 'event')).toBe('k1');
    expect(await readTaskInstance(sealed!, quiet)).toMatchObject({ nextMethod: 'heard', nextKwargs: { event: 'quiet' } });

    for (const ti of [before, id]) {
      expect(await readTaskInstance(sealed!, ti)).toMatchObject({ nextMethod: 'heard', nextKwargs: { token: 'hunter2-kwarg', event: 'hunter2-event' } });
      const context: TaskContext = { taskInstance: { id: ti, dagId: 'secrets', taskId: 'shout', runId: 'x', mapIndex: 0, tryNumber: 1 } };
      expect(await resumeTaskInstance(sealed!, ti, new Shout({ taskId: 'shout' }), context)).toBe('hunter2-event/hunter2-kwarg');
    }
    // A value sealed in text form (all that deferflow wrote before the bytes form, SQLite included) still reads.
    const legacy = await deferredShout(sealed!, 'legacy');
    const legacyKwargs = Keyring.fromEntries([K1], 'test').seal('{"token":"legacy-kwarg"}', 'task_instance.next_kwargs');
    await plain!.db.updateTable('task_instance').set({ next_kwargs: legacyKwargs }).where('id', '=', legacy).execute();
    expect((await rawRows(plain!, legacy)).ti.next_kwargs).toBe(legacyKwargs);
    expect(await readTaskInstance(sealed!, legacy)).toMatchObject({ nextKwargs: { token: 'legacy-kwarg' } });
    // Without the key, a read names the row and the key instead of handing back ciphertext.
    await expect(readTaskInstance(plain!, id)).rejects.toMatchObject({
      code: 'DF_ENCRYPTION_KEY',
      message: expect.stringContaining(`task instance ${id}: its task_instance.next_kwargs is encrypted with key "k1"`),
    });
  }, 60_000);

  it('a burst of sealed waits is claimed, opened, fired and sealed in large batches, each task instance getting its own event; equal events of a batch share one sealed value', async () => {
    const url = await freshDatabaseUrl(dialect);
    const [sealed] = await databases(url, [K1]);
    const ids: number[] = [];
    for (let i = 0; i < 300; i++) {
      const id = await createTaskInstance(sealed!, { dagId: 'secrets', taskId: `burst_${i}`, runId: 'burst' });
      await deferTaskInstance(
        sealed!,
        id,
        // 100 events, each three times (on triggers of their own: not shared, so not one trigger's event).
        new TaskDeferred({ trigger: new EchoTrigger({ message: `event-${i % 100}` }), method: 'heard', kwargs: { token: `kwarg-${i}` }, deduplicate: false }),
      );
      ids.push(id);
    }
    app = await deferflow({
      databaseUrl: url,
      worker: false,
      scheduler: false,
      triggerer: { pollInterval: 0.1, claimsPerLoop: 1000, triggerClasses: [EchoTrigger] },
      logger: pino({ level: 'silent' }),
      encryptionKeys: [K1],
    });
    await waitFor(
      async () =>
        Number(
          (
            await sealed!.db
              .selectFrom('task_instance')
              .select((eb) => eb.fn.countAll().as('n'))
              .where('state', '=', 'scheduled')
              .executeTakeFirstOrThrow()
          ).n,
        ) === 300,
      { what: 'all 300 task instances scheduled' },
    );
    const storedEvents = new Set<string>();
    for (const [i, id] of ids.entries()) {
      const event = (await rawRows(sealed!, id)).ti.next_event;
      expect(sealedKeyOf(sealed!, event, 'event')).toBe('k1');
      storedEvents.add(seenAtRest(event));
      expect(await readTaskInstance(sealed!, id)).toMatchObject({ nextKwargs: { token: `kwarg-${i}`, event: `event-${i % 100}` } });
    }
    // Each event sealed once per batch it was fired in, at most three times, at least once.
    expect(storedEvents.size).toBeGreaterThanOrEqual(100);
    expect(storedEvents.size).toBeLessThan(300);
  }, 60_000);

  it('a trigger whose kwargs were sealed with a missing or wrong key fails only its own task instances; the others fire', async () => {
    const url = await freshDatabaseUrl(dialect);
    const [good, gone, impostor] = await databases(url, [K1], [GONE], [K1_IMPOSTOR]);
    const fine = await deferredShout(good!, 'fine');
    const missingKey = await deferredShout(gone!, 'missing');
    const wrongKey = await deferredShout(impostor!, 'wrong');
    const bystander = await deferredShout(Object.assign({}, good!, { keyring: Keyring.none }) as Database, 'plain');

    app = await triggererApp(url, [K1]);
    for (const ti of [fine, missingKey, wrongKey, bystander]) {
      await waitFor(
        async () => (await good!.db.selectFrom('task_instance').select('state').where('id', '=', ti).executeTakeFirstOrThrow()).state === 'scheduled',
        {
          what: `task instance ${ti} moved`,
        },
      );
    }
    for (const ti of [fine, bystander])
      expect(await readTaskInstance(good!, ti)).toMatchObject({ nextMethod: 'heard', nextKwargs: { event: 'hunter2-event' } });
    const triggerOf = async (ti: number) =>
      (await good!.db.selectFrom('trigger_wait').select('trigger_id').where('task_instance_id', '=', ti).executeTakeFirstOrThrow()).trigger_id;
    const missing = await readTaskInstance(good!, missingKey);
    expect(missing).toMatchObject({ nextMethod: TRIGGER_FAILURE_METHOD, nextKwargs: { code: 'DF_ENCRYPTION_KEY' } });
    expect(String(missing!.nextKwargs!.error)).toContain(
      `trigger ${await triggerOf(missingKey)}: its trigger.kwargs is encrypted with key "gone", which is not among this process's keys (k1)`,
    );
    const wrong = await readTaskInstance(good!, wrongKey);
    expect(wrong).toMatchObject({ nextMethod: TRIGGER_FAILURE_METHOD, nextKwargs: { code: 'DF_ENCRYPTION_KEY' } });
    expect(String(wrong!.nextKwargs!.error)).toContain(`trigger ${await triggerOf(wrongKey)}: its trigger.kwargs does not decrypt with key "k1"`);
    expect(app.triggerer!.jobId).not.toBeNull();
  }, 60_000);

  it('a try whose next_kwargs cannot be decrypted fails at once without retries, naming the row and the key; the worker runs on', async () => {
    const project = scratch.dir(`encrypted-dag-${dialect}`);
    mkdirSync(path.join(project, 'dags'));
    writeFileSync(
      path.join(project, 'dags/secrets.mjs'),
      `import { BaseOperator, Dag } from ${JSON.stringify(PACKAGE_ENTRY)};
import { EchoTrigger } from ${JSON.stringify(path.resolve('test/fixtures/custom-trigger-module.ts'))};
class Shout extends BaseOperator {
  execute(context) { return this.defer({ trigger: new EchoTrigger({ message: 'hunter2-' + context.dagRun.conf.n }), method: 'heard', kwargs: { token: 'kw' } }); }
  heard(_context, event, kwargs) { return event + '/' + kwargs.token; }
}
export const dag = new Dag({ dagId: 'secrets' }).add(new Shout({ taskId: 'shout', retries: 3 }));
`,
    );
    const url = await freshDatabaseUrl(dialect);
    app = await deferflow({
      databaseUrl: url,
      dagsFolder: path.join(project, 'dags'),
      worker: { concurrency: 2, pollInterval: 0.2, shutdownGrace: 0, taskIsolation: 'none' },
      scheduler: { pollInterval: 0.2 },
      triggerer: { pollInterval: 0.2, triggerClasses: [EchoTrigger] },
      logger: pino({ level: 'silent' }),
      encryptionKeys: [K2, K1],
    });
    // A whole deferring run, every process encrypting.
    const first = await app.triggerDagRun('secrets', { conf: { n: 1 } });
    expect(await app.waitForDagRun('secrets', first)).toBe('success');
    const done = await app.database.db.selectFrom('task_instance').select(['id', 'return_value']).where('run_id', '=', first).executeTakeFirstOrThrow();
    expect(JSON.parse(done.return_value!)).toBe('hunter2-1/kw');

    // A second run's task, resuming with next_kwargs sealed by a key no process here has.
    const second = await app.triggerDagRun('secrets', { conf: { n: 2 } });
    expect(await app.waitForDagRun('secrets', second)).toBe('success');
    const ti = await app.database.db.selectFrom('task_instance').select('id').where('run_id', '=', second).executeTakeFirstOrThrow();
    await app.database.db
      .updateTable('task_instance')
      .set({
        state: 'scheduled',
        next_method: 'heard',
        next_kwargs: app.database.adapter.jsonParam(Keyring.fromEntries([GONE], 'test').seal('{"token":"kw"}', 'task_instance.next_kwargs')),
        next_event: null,
        end_date: null,
      })
      .where('id', '=', ti.id)
      .execute();
    await app.database.db.updateTable('dag_run').set({ state: 'running', end_date: null }).where('run_id', '=', second).execute();
    app.worker!.wake();
    const stateOf = async () => (await app!.database.db.selectFrom('task_instance').select('state').where('id', '=', ti.id).executeTakeFirstOrThrow()).state;
    await waitFor(async () => (await stateOf()) === 'failed', { what: 'the unreadable try failed' });
    const row = await app.database.db
      .selectFrom('task_instance')
      .select(['state', 'try_number', 'max_tries'])
      .where('id', '=', ti.id)
      .executeTakeFirstOrThrow();
    expect(row).toMatchObject({ state: 'failed', try_number: 1, max_tries: 3 });
    const log = (await openStores(app.database).logs.readTaskLog(ti.id, 1)).map((line) => line.message).join('\n');
    expect(log).toContain(`failed: EncryptionKeyError: task instance ${ti.id}: its task_instance.next_kwargs is encrypted with key "gone"`);
    // The worker goes on: a third run succeeds.
    const third = await app.triggerDagRun('secrets', { conf: { n: 3 } });
    expect(await app.waitForDagRun('secrets', third)).toBe('success');
  }, 90_000);

  it('a key pasted under a known id with other material is refused by `db rotate-key` and by a daemon at start, and nothing is written with it', async () => {
    const url = await freshDatabaseUrl(dialect);
    expect((await runCli(['db', 'migrate', '--db', url])).code).toBe(0);
    const generate = async () => (await runCli(['db', 'generate-key', '--id', 'k1'])).stdout.trim();
    const [realK1, wrongK1] = [await generate(), await generate()];
    const [sealed, plain, real] = await databases(url, [realK1], [], [realK1]);
    const sealedTi = await deferredShout(sealed!, 'sealed');
    const plainTi = await deferredShout(plain!, 'plain');
    const rows = () => Promise.all([sealedTi, plainTi].map((id) => rawRows(plain!, id)));
    const untouched = await rows();

    // The database has never recorded k1: the value sealed with the real k1 does not open with the wrong one.
    const wrongRotation = await runCli(['db', 'rotate-key', '--db', url], { DEFERFLOW_ENCRYPTION_KEYS: wrongK1 });
    expect(wrongRotation.stderr).toContain('error [DF_ENCRYPTION_KEY_MISMATCH]: encryption key k1 is not the key this database knows by that id');
    expect(wrongRotation.stderr).toContain(`trigger ${untouched[0]!.ti.trigger_id}'s kwargs, sealed with k1, does not decrypt with it`);
    expect(wrongRotation.code).toBe(2);
    expect(wrongRotation.stdout).toBe('');
    const wrongDaemon = await runCli(['triggerer', '--db', url], { DEFERFLOW_ENCRYPTION_KEYS: wrongK1 });
    expect(wrongDaemon.stderr).toContain('DF_ENCRYPTION_KEY_MISMATCH');
    expect(wrongDaemon.code).toBe(2);
    expect(await rows()).toEqual(untouched);

    // The real key: the plain values are sealed, the sealed ones opened and counted, and k1 is recorded.
    const rotation = await runCli(['db', 'rotate-key', '--db', url], { DEFERFLOW_ENCRYPTION_KEYS: realK1 });
    expect(rotation.stdout).toContain(
      're-encrypted 2 value(s) with key k1 (trigger kwargs 1, next_kwargs 1, events 0, task state 0, composite members 0); 2 already were',
    );
    expect(rotation.code).toBe(0);
    const recorded = await plain!.db.selectFrom('encryption_key').select(['key_id', 'check_value']).execute();
    expect(recorded).toEqual([{ key_id: 'k1', check_value: expect.any(String) }]);
    // The check value is not the key.
    expect(realK1).not.toContain(recorded[0]!.check_value);
    const rotated = await rows();

    // Now refused from the recorded check value, by the rotation and by every daemon.
    const again = await runCli(['db', 'rotate-key', '--db', url], { DEFERFLOW_ENCRYPTION_KEYS: wrongK1 });
    expect(again.stderr).toContain('error [DF_ENCRYPTION_KEY_MISMATCH]: encryption key k1 is not the key this database knows by that id');
    expect(again.stderr).toContain('the database recorded other key material under k1');
    expect(again.code).toBe(2);
    for (const daemon of [['triggerer'], ['worker', '--dags', scratch.dir(`no-dags-${dialect}`)], ['scheduler']]) {
      const refused = await runCli([...daemon, '--db', url], { DEFERFLOW_ENCRYPTION_KEYS: wrongK1 });
      expect(refused.stderr, daemon[0]).toContain('error [DF_ENCRYPTION_KEY_MISMATCH]');
      expect(refused.code, daemon[0]).toBe(2);
    }
    // Second key listed after the wrong one: refused too (every key is checked, not only the sealing one).
    const listedSecond = await runCli(['db', 'rotate-key', '--db', url], { DEFERFLOW_ENCRYPTION_KEYS: `${K2},${wrongK1}` });
    expect(listedSecond.stderr).toContain('DF_ENCRYPTION_KEY_MISMATCH');
    expect(listedSecond.code).toBe(2);
    expect(await rows()).toEqual(rotated);

    // Every value still reads with the real key.
    for (const id of [sealedTi, plainTi]) {
      expect(await readTaskInstance(real!, id)).toMatchObject({ nextKwargs: { token: 'hunter2-kwarg' } });
      const raw = await rawRows(plain!, id);
      expect(sealedKeyOf(plain!, raw.trigger!.kwargs)).toBe('k1');
      expect(Keyring.fromEntries([realK1], 'test').open(raw.trigger!.kwargs, 'trigger.kwargs', 'trigger')).toContain('hunter2-event');
    }
    // And a daemon with the real key starts and fires both.
    app = await triggererApp(url, [realK1]);
    for (const id of [sealedTi, plainTi]) {
      await waitFor(async () => (await readTaskInstance(real!, id))?.state === 'scheduled', { what: `task instance ${id} resumed` });
    }
  }, 90_000);

  it('`deferflow db rotate-key` re-encrypts plain and old-key values with the first key; with any value unreadable it writes nothing, names each row, and exits 1', async () => {
    const url = await freshDatabaseUrl(dialect);
    const [plain, old, gone] = await databases(url, [], [K1], [GONE]);
    const ids = [await deferredShout(plain!, 'plain'), await deferredShout(old!, 'old')];
    const lost = await deferredShout(gone!, 'gone');
    // Empty kwargs: kept plain with keys too, so rotating leaves them (counted with those already done).
    const quiet = await createTaskInstance(plain!, { dagId: 'secrets', taskId: 'quiet', runId: 'quiet' });
    await deferTaskInstance(plain!, quiet, deferralOf(new Quiet({ taskId: 'quiet' })));
    // An event sealed in text form with k1 (as written before SQLite stored events as bytes).
    await plain!.db
      .updateTable('task_instance')
      .set({ next_event: Keyring.fromEntries([K1], 'test').seal('"an event"', 'task_instance.next_event') })
      .where('id', '=', ids[1]!)
      .execute();
    const dir = scratch.dir(`rotate-${dialect}`);
    const keysFile = path.join(dir, 'keys.txt');
    writeFileSync(keysFile, `${K2}\n${K1}\n`);

    const refused = await runCli(['db', 'rotate-key', '--db', url], { DEFERFLOW_ENCRYPTION_KEYS: '' });
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('error [DF_INVALID_OPTION]: encryption-keys-file: db rotate-key needs the keys');

    const before = await Promise.all([...ids, lost, quiet].map((id) => rawRows(plain!, id)));
    const stopped = await runCli(['db', 'rotate-key', '--db', url, '--encryption-keys-file', keysFile]);
    expect(stopped.stderr).toContain(`error [DF_ENCRYPTION_KEY]: trigger `);
    expect(stopped.stderr).toContain(`error [DF_ENCRYPTION_KEY]: task instance ${lost}: its task_instance.next_kwargs is encrypted with key "gone"`);
    expect(stopped.stderr).toContain('2 value(s) could not be decrypted, so nothing was re-encrypted');
    expect(stopped.code).toBe(1);
    expect(stopped.stdout).toBe('');
    // Not one row changed.
    expect(await Promise.all([...ids, lost, quiet].map((id) => rawRows(plain!, id)))).toEqual(before);

    // With the lost key listed too: plain trigger kwargs and next_kwargs, the k1 ones and the event, and the lost ones.
    writeFileSync(keysFile, `${K2}\n${K1}\n${GONE}\n`);
    const rotated = await runCli(['db', 'rotate-key', '--db', url, '--encryption-keys-file', keysFile]);
    expect(rotated.stderr).toBe('');
    expect(rotated.stdout).toContain(
      're-encrypted 7 value(s) with key k2 (trigger kwargs 3, next_kwargs 3, events 1, task state 0, composite members 0); 2 already were',
    );
    expect(rotated.code).toBe(0);

    const [k2Only] = await databases(url, [K2]);
    for (const id of ids) {
      const raw = await rawRows(plain!, id);
      expect(sealedKeyOf(plain!, raw.ti.next_kwargs)).toBe('k2');
      expect(sealedKeyOf(plain!, raw.trigger!.kwargs)).toBe('k2');
      expect(await readTaskInstance(k2Only!, id)).toMatchObject({ nextKwargs: { token: 'hunter2-kwarg' } });
    }
    // The event is now in the form events are written in (bytes on SQLite).
    expect(sealedKeyOf(plain!, (await rawRows(plain!, ids[1]!)).ti.next_event, 'event')).toBe('k2');
    expect(await readTaskInstance(k2Only!, ids[1]!)).toMatchObject({ nextKwargs: { event: 'an event' } });
    expect(sealedKeyOf(plain!, (await rawRows(plain!, lost)).ti.next_kwargs)).toBe('k2');
    const quietRaw = await rawRows(plain!, quiet);
    expect([quietRaw.ti.next_kwargs, quietRaw.trigger!.kwargs]).toEqual(['{}', '{}']);

    const idle = await runCli(['db', 'rotate-key', '--db', url], { DEFERFLOW_ENCRYPTION_KEYS: K2 });
    expect(idle.stdout).toContain(
      're-encrypted 0 value(s) with key k2 (trigger kwargs 0, next_kwargs 0, events 0, task state 0, composite members 0); 9 already were',
    );
    expect(idle.code).toBe(0);

    const generated = await runCli(['db', 'generate-key', '--id', 'next']);
    expect(generated.code).toBe(0);
    expect(Keyring.fromEntries([generated.stdout.trim()], 'generated').keyIds).toEqual(['next']);
  }, 60_000);
});
