import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { InvalidTriggerArgumentError } from '../../../src/vocabulary/errors.ts';
import type { TriggerEvent } from '../../../src/authoring/triggers/trigger-event.ts';
import { FileTrigger } from '../../../triggers/index.ts';

let dir: string;

beforeEach(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'deferflow-file-trigger-'));
});

afterEach(async () => {
  await fs.rm(dir, { recursive: true, force: true });
});

const delay = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function write(relative: string): Promise<void> {
  const file = path.join(dir, relative);
  await fs.mkdir(path.dirname(file), { recursive: true });
  await fs.writeFile(file, 'x');
}

/** Runs the trigger outside a triggerer; resolves with its first event, or 'timeout' after `ms`. */
async function eventWithin(trigger: FileTrigger, ms: number): Promise<TriggerEvent | 'timeout'> {
  const controller = new AbortController();
  const iterator = trigger.run(controller.signal);
  const next = iterator.next();
  const outcome = await Promise.race([next.then((result) => result.value ?? 'ended'), delay(ms).then(() => 'timeout' as const)]);
  if (outcome === 'timeout') {
    controller.abort();
    await next.catch(() => undefined); // the poll loop stops at its next check
  }
  if (outcome === 'ended') throw new Error('the trigger ended without an event');
  return outcome as TriggerEvent | 'timeout';
}

describe('FileTrigger', () => {
  it('fires at once for a file that exists', async () => {
    await write('ready.txt');
    const event = await eventWithin(new FileTrigger({ path: path.join(dir, 'ready.txt') }), 500);
    expect(event).not.toBe('timeout');
    expect((event as TriggerEvent).payload).toEqual({ path: path.join(dir, 'ready.txt') });
  });

  it('fires when the file appears later', async () => {
    const started = Date.now();
    setTimeout(() => void write('later.txt'), 200);
    const event = await eventWithin(new FileTrigger({ path: path.join(dir, 'later.txt'), pollInterval: 0.05 }), 1500);
    expect(event).not.toBe('timeout');
    expect((event as TriggerEvent).payload).toEqual({ path: path.join(dir, 'later.txt') });
    expect(Date.now() - started).toBeGreaterThanOrEqual(195);
    expect(Date.now() - started).toBeLessThan(600);
  });

  it('resolves a relative path and reports the absolute path', async () => {
    await write('rel.txt');
    const relative = path.relative(process.cwd(), path.join(dir, 'rel.txt'));
    const trigger = new FileTrigger({ path: relative });
    expect(trigger.path).toBe(path.join(dir, 'rel.txt'));
    const event = await eventWithin(trigger, 500);
    expect((event as TriggerEvent).payload).toEqual({ path: path.join(dir, 'rel.txt') });
  });

  it('fires on a glob dir/*.csv, ignoring non-matching files', async () => {
    await write('in/notes.txt');
    await write('in/.partial.csv');
    await write('in/data.csv.tmp');
    await fs.mkdir(path.join(dir, 'in/folder.csv'));
    setTimeout(() => void write('in/data.csv'), 200);
    const event = await eventWithin(new FileTrigger({ path: path.join(dir, 'in/*.csv'), pollInterval: 0.05 }), 1500);
    expect(event).not.toBe('timeout');
    expect((event as TriggerEvent).payload).toEqual({ path: path.join(dir, 'in/data.csv') });
  });

  it('fires on a recursive glob dir/**/done.flag', async () => {
    await write('out/a/done.flag.tmp');
    setTimeout(() => void write('out/a/b/done.flag'), 200);
    const trigger = new FileTrigger({ path: path.join(dir, 'out/**/done.flag'), pollInterval: 0.05, recursive: true });
    const event = await eventWithin(trigger, 1500);
    expect(event).not.toBe('timeout');
    expect((event as TriggerEvent).payload).toEqual({ path: path.join(dir, 'out/a/b/done.flag') });
  });

  it('does not fire while only non-matching files exist', async () => {
    await write('in/notes.txt');
    await write('in/sub/deep.csv');
    await write('in/data.csv.tmp');
    const event = await eventWithin(new FileTrigger({ path: path.join(dir, 'in/*.csv'), pollInterval: 0.05 }), 300);
    expect(event).toBe('timeout');
    // Without recursive, ** spans one directory only.
    const shallow = new FileTrigger({ path: path.join(dir, '**/deep.csv'), pollInterval: 0.05 });
    expect(await eventWithin(shallow, 200)).toBe('timeout');
  });

  it('does not fire for a directory at the path', async () => {
    await fs.mkdir(path.join(dir, 'not-a-file'));
    expect(await eventWithin(new FileTrigger({ path: path.join(dir, 'not-a-file'), pollInterval: 0.05 }), 200)).toBe('timeout');
  });

  it('serializes canonically (absolute path, defaults filled in) and round-trips', () => {
    const trigger = new FileTrigger({ path: path.join(dir, 'x', '..', 'in/*.csv') });
    const serialized = trigger.serialize();
    expect(serialized).toEqual({
      classpath: 'deferflow.triggers.FileTrigger',
      kwargs: { path: path.join(dir, 'in/*.csv'), pollInterval: 5, recursive: false },
    });
    expect(new FileTrigger(serialized.kwargs as { path: string }).serialize()).toEqual(serialized);
    expect(new FileTrigger({ path: path.join(dir, 'in/*.csv'), pollInterval: 5, recursive: false }).serialize()).toEqual(serialized);
    expect(Object.keys(trigger)).toEqual(['path', 'pollInterval', 'recursive', 'minSize', 'unchangedFor']);
  });

  it('refuses bad kwargs, naming the value', () => {
    const cases: [unknown, string][] = [
      [{ path: '' }, 'path ""'],
      [{ path: 42 }, 'path number 42'],
      [{}, 'path undefined'],
      [{ path: 'a\0b' }, 'path "a\\u0000b"'],
      [{ path: '/x', pollInterval: 0 }, 'pollInterval number 0'],
      [{ path: '/x', pollInterval: -1 }, 'pollInterval number -1'],
      [{ path: '/x', pollInterval: Number.NaN }, 'pollInterval number NaN'],
      [{ path: '/x', pollInterval: Number.POSITIVE_INFINITY }, 'pollInterval number Infinity'],
      [{ path: '/x', pollInterval: '5' }, 'pollInterval "5"'],
      [{ path: '/x', recursive: 'yes' }, 'recursive "yes"'],
      [{ path: '/x', poll_interval: 5 }, '"poll_interval"'],
      [{ path: '/data/[z-a].csv' }, '"/data/[z-a].csv" is not a valid glob'],
      [null, 'kwargs'],
    ];
    for (const [kwargs, named] of cases) {
      let thrown: unknown;
      try {
        new FileTrigger(kwargs as never);
      } catch (error) {
        thrown = error;
      }
      expect(thrown, JSON.stringify(kwargs)).toBeInstanceOf(InvalidTriggerArgumentError);
      expect((thrown as Error).message).toContain('FileTrigger');
      expect((thrown as Error).message).toContain(named);
    }
  });
});

describe('FileTrigger minSize and unchangedFor', () => {
  it('fires only once the file is big enough and has stopped changing', async () => {
    const file = path.join(dir, 'growing.csv');
    await fs.writeFile(file, 'abc');
    const small = new FileTrigger({ path: file, pollInterval: 0.05, minSize: 10 });
    expect(await eventWithin(small, 300)).toBe('timeout');
    await fs.appendFile(file, 'defghijkl');
    expect(await eventWithin(small, 2_000)).toMatchObject({ payload: { path: file } });

    const settling = new FileTrigger({ path: file, pollInterval: 0.05, unchangedFor: 1 });
    await fs.appendFile(file, 'more'); // modified just now
    expect(await eventWithin(settling, 300)).toBe('timeout');
    const longAgo = new Date(Date.now() - 2_000);
    await fs.utimes(file, longAgo, longAgo);
    expect(await eventWithin(settling, 2_000)).toMatchObject({ payload: { path: file } });
  });

  it('serializes the checks only when set, so a plain wait keeps its kwargs (and its dedup hash)', () => {
    const plain = new FileTrigger({ path: path.join(dir, 'x') });
    expect(plain.serialize().kwargs).toEqual({ path: path.join(dir, 'x'), pollInterval: 5, recursive: false });
    const checked = new FileTrigger({ path: path.join(dir, 'x'), minSize: 1, unchangedFor: 2.5 });
    expect(new FileTrigger(checked.serialize().kwargs as never).serialize()).toEqual(checked.serialize());
  });

  it('refuses a bad minSize or unchangedFor, naming it', () => {
    expect(() => new FileTrigger({ path: path.join(dir, 'x'), minSize: -1 })).toThrow(/minSize number -1 is not a number of bytes/);
    expect(() => new FileTrigger({ path: path.join(dir, 'x'), minSize: 1.5 })).toThrow(InvalidTriggerArgumentError);
    expect(() => new FileTrigger({ path: path.join(dir, 'x'), unchangedFor: Number.NaN })).toThrow(/unchangedFor number NaN is not a number of seconds/);
  });
});
