import { describe, expect, it } from 'vitest';
import { refusalLines } from '../../src/cli/refusal.ts';
import { closestName } from '../../src/vocabulary/suggest.ts';

const WORKER = ['concurrency', 'pollInterval', 'heartbeatInterval', 'shutdownGrace', 'queues'];

describe('closestName', () => {
  it('names the option a typo most likely meant: a letter dropped, added, changed, or two swapped', () => {
    expect(closestName('concurency', WORKER)).toBe('concurrency');
    expect(closestName('concurrrency', WORKER)).toBe('concurrency');
    expect(closestName('pollIntreval', WORKER)).toBe('pollInterval');
    expect(closestName('queeus', WORKER)).toBe('queues');
    expect(closestName('shutdownGrase', WORKER)).toBe('shutdownGrace');
  });

  it('compares a flag with an option whatever the case, dashes or underscores', () => {
    expect(closestName('poll-interval', WORKER)).toBe('pollInterval');
    expect(closestName('poll_intervl', WORKER)).toBe('pollInterval');
    expect(closestName('Concurrency', WORKER)).toBe('concurrency');
    expect(closestName('pollinterval', ['poll-interval', 'heartbeat-interval'])).toBe('poll-interval');
  });

  it('names the one flag a name is the tail of: a prefix left out', () => {
    expect(closestName('port', ['http-port', 'http-host', 'db'])).toBe('http-port');
    expect(closestName('token', ['web-token', 'db'])).toBe('web-token');
    // Two flags end so: which one was meant is not plain.
    expect(closestName('interval', ['poll-interval', 'heartbeat-interval'])).toBeNull();
  });

  it('names nothing when no option is close: another word is not a typo', () => {
    expect(closestName('speed', WORKER)).toBeNull();
    expect(closestName('zzz', WORKER)).toBeNull();
    expect(closestName('interval', WORKER)).toBeNull();
    expect(closestName('concurrency', [])).toBeNull();
    expect(closestName('xy', ['db', 'dags'])).toBeNull();
    expect(closestName('polInterval', ['heartbeat-interval'])).toBeNull();
  });

  it('prefers the nearest of several candidates', () => {
    expect(closestName('port', ['prot', 'sport', 'part'])).toBe('prot');
    expect(closestName('dag', ['dags', 'db'])).toBe('dags');
  });
});

describe('refusalLines', () => {
  const usage = (flags: string[]) => ({ getDescriptions: () => Object.fromEntries(flags.map((flag) => [flag, ''])), getCommands: () => [] });
  const registering = (): never => {
    throw new TypeError('the commands could not be read');
  };

  it('keeps the refusal whatever goes wrong finding suggestions: a usage yargs did not give, commands that cannot be read', () => {
    expect(refusalLines('Unknown argument: dagz', undefined, ['dags', 'list'], registering)).toEqual(['error: Unknown argument: dagz']);
    expect(refusalLines('Unknown argument: dagz', usage(['db', 'json']), ['dags', 'list'], registering)).toEqual(['error: Unknown argument: dagz']);
    expect(refusalLines('Not enough non-option arguments: got 0, need at least 1', usage(['db']), ['db'], registering)).toEqual([
      'error: Not enough non-option arguments: got 0, need at least 1',
    ]);
  });

  it('lists a flag yargs gives twice (as typed and camel-cased) once, but a camel-cased flag as the user typed it', () => {
    expect(refusalLines('Unknown arguments: pol-interval, polInterval, zzz', usage(['poll-interval']), ['worker'], () => {}).slice(0, 2)).toEqual([
      'error: Unknown arguments: pol-interval, zzz',
      'pol-interval: did you mean --poll-interval?',
    ]);
    expect(refusalLines('Unknown argument: polInterval', usage(['poll-interval']), ['worker'], () => {})).toEqual([
      'error: Unknown argument: polInterval',
      'polInterval: did you mean --poll-interval?',
    ]);
  });
});
