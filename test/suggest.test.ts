import { describe, expect, it } from 'vitest';
import { closestName } from '../src/config/suggest.ts';

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
