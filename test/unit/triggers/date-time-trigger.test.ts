import { DateTime, Duration } from 'luxon';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { renderStartTriggerKwargs } from '../../../src/authoring/triggers/start-trigger-kwargs.ts';
import { InvalidTriggerArgumentError } from '../../../src/vocabulary/errors.ts';
import { classpathOf, type BaseTrigger } from '../../../src/authoring/triggers/base-trigger.ts';
import { TriggerRegistry } from '../../../src/authoring/triggers/registry.ts';
import type { TriggerEvent } from '../../../src/authoring/triggers/trigger-event.ts';
import { BUILTIN_TRIGGERS, DateTimeTrigger, FileTrigger, TimeDeltaTrigger } from '../../../triggers/index.ts';

/** Runs a trigger outside a triggerer and returns its first event. */
async function firstEvent(trigger: BaseTrigger): Promise<TriggerEvent> {
  for await (const event of trigger.run(new AbortController().signal)) return event as TriggerEvent;
  throw new Error('the trigger ended without an event');
}

/** The InvalidTriggerArgumentError `build` throws. */
function refusal(build: () => unknown): InvalidTriggerArgumentError {
  try {
    build();
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidTriggerArgumentError);
    expect((error as InvalidTriggerArgumentError).code).toBe('DF_INVALID_TRIGGER_ARGUMENT');
    return error as InvalidTriggerArgumentError;
  }
  throw new Error('expected an InvalidTriggerArgumentError, nothing was thrown');
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('DateTimeTrigger construction', () => {
  it('refuses a naive string, naming it and what to pass', () => {
    const error = refusal(() => new DateTimeTrigger({ moment: '2030-05-01T12:00:00' }));
    expect(error.message).toContain('DateTimeTrigger');
    expect(error.message).toContain('"2030-05-01T12:00:00"');
    expect(error.message).toMatch(/naive/);
    expect(error.message).toMatch(/offset or Z/);
    // A date alone is naive too (its "-01" is no offset).
    expect(refusal(() => new DateTimeTrigger({ moment: '2030-05-01' })).message).toContain('"2030-05-01"');
  });

  it('refuses an invalid string', () => {
    expect(refusal(() => new DateTimeTrigger({ moment: 'tomorrow at noon' })).message).toContain('"tomorrow at noon"');
    expect(refusal(() => new DateTimeTrigger({ moment: '' })).message).toContain('""');
    expect(refusal(() => new DateTimeTrigger({ moment: '2030-13-01T00:00:00Z' })).message).toContain('2030-13-01');
    expect(refusal(() => new DateTimeTrigger({ moment: '2030-05-01T12:00:60Z' })).message).toContain('12:00:60');
  });

  it('refuses Feb 30 and Feb 29 of a common year, on the fast path too', () => {
    for (const moment of ['2030-02-30T00:00:00Z', '2030-02-30T00:00:00.000Z', '2030-02-29T00:00:00.000+02:00', '2030-04-31T00:00:00.000Z']) {
      expect(refusal(() => new DateTimeTrigger({ moment })).message).toContain(JSON.stringify(moment));
    }
    expect(new DateTimeTrigger({ moment: '2028-02-29T00:00:00.000Z' }).moment).toBe('2028-02-29T00:00:00.000Z');
    expect(new DateTimeTrigger({ moment: '2000-02-29T00:00:00.000Z' }).moment).toBe('2000-02-29T00:00:00.000Z');
    expect(() => new DateTimeTrigger({ moment: '2100-02-29T00:00:00.000Z' })).toThrow(InvalidTriggerArgumentError);
  });

  it('refuses a number and anything else that is not a moment', () => {
    const error = refusal(() => new DateTimeTrigger({ moment: 1_900_000_000_000 as never }));
    expect(error.message).toContain('1900000000000');
    expect(error.message).toMatch(/new Date\(ms\)/);
    expect(refusal(() => new DateTimeTrigger({ moment: null as never })).message).toContain('null');
    expect(refusal(() => new DateTimeTrigger({ moment: undefined as never })).message).toContain('undefined');
    expect(refusal(() => new DateTimeTrigger({ moment: { iso: 'x' } as never })).message).toContain('an object');
    expect(refusal(() => new DateTimeTrigger(undefined as never)).message).toContain('kwargs');
    expect(refusal(() => new DateTimeTrigger({ moment: '2030-05-01T12:00:00Z', when: 1 } as never)).message).toContain('"when"');
  });

  it('refuses an invalid Date or DateTime', () => {
    expect(refusal(() => new DateTimeTrigger({ moment: new Date('nope') })).message).toContain('Invalid Date');
    const invalid = DateTime.invalid('the clock broke');
    expect(refusal(() => new DateTimeTrigger({ moment: invalid })).message).toContain('the clock broke');
  });

  it('stores the instant in UTC, one canonical form however it was given', () => {
    const cases: [string, string][] = [
      ['2030-05-01T14:00:00+02:00', '2030-05-01T12:00:00.000Z'],
      ['2030-05-01T06:30:00.250-05:30', '2030-05-01T12:00:00.250Z'],
      ['2030-05-01T12:00:00Z', '2030-05-01T12:00:00.000Z'],
      ['2030-05-01T12:00:00+00:00', '2030-05-01T12:00:00.000Z'],
      ['2030-05-01T12:00Z', '2030-05-01T12:00:00.000Z'],
      ['20300501T140000+0200', '2030-05-01T12:00:00.000Z'],
      // Across a date line: the UTC day differs from the local one.
      ['2030-05-01T01:00:00+05:00', '2030-04-30T20:00:00.000Z'],
    ];
    for (const [given, canonical] of cases) {
      const trigger = new DateTimeTrigger({ moment: given });
      expect(trigger.serialize()).toEqual({ classpath: 'deferflow.triggers.DateTimeTrigger', kwargs: { moment: canonical } });
      expect(trigger.momentMs).toBe(Date.parse(canonical));
    }
  });

  it('accepts a Date and a luxon DateTime in any zone, as their instant in UTC', () => {
    const date = new Date('2030-05-01T12:00:00.123Z');
    const fromDate = new DateTimeTrigger({ moment: date });
    expect(fromDate.moment).toBe('2030-05-01T12:00:00.123Z');
    expect(fromDate.momentMs).toBe(date.getTime());

    const zoned = DateTime.fromISO('2030-01-15T09:00:00', { zone: 'America/New_York' });
    const fromDateTime = new DateTimeTrigger({ moment: zoned });
    expect(fromDateTime.moment).toBe('2030-01-15T14:00:00.000Z');
    expect(fromDateTime.momentMs).toBe(zoned.toMillis());
  });

  it('round-trips through serialize() to an equal trigger', () => {
    for (const moment of [
      '2030-05-01T14:00:00+02:00',
      '2030-05-01T12:00:00Z',
      new Date('2031-01-01T00:00:00Z'),
      DateTime.fromISO('2030-07-01T08:00:00', { zone: 'Asia/Kolkata' }),
      '+010000-01-01T00:00:00.000Z',
    ]) {
      const first = new DateTimeTrigger({ moment });
      const again = new DateTimeTrigger(first.serialize().kwargs as { moment: string });
      expect(again.serialize()).toEqual(first.serialize());
      expect(again.momentMs).toBe(first.momentMs);
    }
  });

  it('rebuilds serialized moments on the fast path, without luxon, keeping the very string', () => {
    const stored = new DateTimeTrigger({ moment: '2030-05-01T14:00:00+02:00' }).serialize().kwargs.moment as string;
    expect(stored).toBe('2030-05-01T12:00:00.000Z');
    const fromISO = vi.spyOn(DateTime, 'fromISO');
    for (let i = 0; i < 1000; i++) {
      expect(new DateTimeTrigger({ moment: stored }).moment).toBe(stored);
    }
    new DateTimeTrigger({ moment: '2030-05-01T12:00:00.000Z' });
    expect(fromISO).not.toHaveBeenCalled();
  });

  it('keeps only its epoch milliseconds on the instance, and makes the canonical moment from them', () => {
    const trigger = new DateTimeTrigger({ moment: '2030-05-01T12:00:00Z' });
    const own = Object.entries(trigger).filter(([, value]) => value !== undefined);
    expect(Object.fromEntries(own)).toEqual({ momentMs: Date.parse('2030-05-01T12:00:00Z') });
    expect(trigger.moment).toBe('2030-05-01T12:00:00.000Z');
    expect(trigger.serialize().kwargs).toEqual({ moment: '2030-05-01T12:00:00.000Z' });
    expect(trigger.endFromTrigger).toBe(false);
  });

  it('keeps the string of a moment past year 9999, whose form is not the short canonical one', () => {
    const far = new Date(Date.UTC(10_000, 0, 1));
    const trigger = new DateTimeTrigger({ moment: far });
    expect(trigger.moment).toBe(far.toISOString());
    expect(new DateTimeTrigger({ moment: trigger.moment }).momentMs).toBe(far.getTime());
  });

  it('with endFromTrigger, serializes the flag and yields an event that ends the task as success', async () => {
    const plain = new DateTimeTrigger({ moment: '2000-01-01T00:00:00Z' });
    const ending = new DateTimeTrigger({ moment: '2000-01-01T00:00:00Z', endFromTrigger: true });
    expect(plain.serialize().kwargs).toEqual({ moment: '2000-01-01T00:00:00.000Z' });
    expect(ending.serialize().kwargs).toEqual({ moment: '2000-01-01T00:00:00.000Z', endFromTrigger: true });
    expect(new DateTimeTrigger(ending.serialize().kwargs as { moment: string; endFromTrigger: boolean }).endFromTrigger).toBe(true);
    expect((await plain.run().next()).value).not.toHaveProperty('taskState');
    expect((await ending.run().next()).value).toMatchObject({ taskState: 'success', payload: '2000-01-01T00:00:00.000Z' });
    expect(() => new DateTimeTrigger({ moment: '2000-01-01T00:00:00Z', endFromTrigger: 'yes' as unknown as boolean })).toThrow(
      /endFromTrigger "yes" is not a boolean/,
    );
  });

  it('is registered by BUILTIN_TRIGGERS under its classpath', () => {
    expect(classpathOf(BUILTIN_TRIGGERS[0])).toBe('deferflow.triggers.DateTimeTrigger');
    expect(new TriggerRegistry(BUILTIN_TRIGGERS).classpaths).toEqual(
      [
        DateTimeTrigger.classpath,
        FileTrigger.classpath,
        'deferflow.triggers.HttpTrigger',
        'deferflow.triggers.SqlTrigger',
        'deferflow.triggers.MqttTrigger',
        'deferflow.triggers.NatsJetStreamTrigger',
        'deferflow.triggers.RabbitMqTrigger',
        'deferflow.triggers.RedisStreamTrigger',
        'deferflow.triggers.TableRowsTrigger',
        'deferflow.triggers.TaskStateTrigger',
        'deferflow.triggers.SignalTrigger',
        'deferflow.SensorPokeTrigger',
        'deferflow.triggers.AnyOf',
        'deferflow.triggers.AllOf',
      ].sort(),
    );
  });
});

describe('DateTimeTrigger.run', () => {
  it('fires at once for a moment in the past, with the moment as payload', async () => {
    const trigger = new DateTimeTrigger({ moment: '2001-09-09T01:46:40.000Z' });
    const started = Date.now();
    const event = await firstEvent(trigger);
    expect(event.payload).toBe('2001-09-09T01:46:40.000Z');
    expect(Date.now() - started).toBeLessThan(50);
  });

  it('fires 300 ms ahead, not before the moment and soon after it', async () => {
    const trigger = new DateTimeTrigger({ moment: new Date(Date.now() + 300) });
    const event = await firstEvent(trigger);
    const firedAt = Date.now();
    expect(firedAt).toBeGreaterThanOrEqual(trigger.momentMs);
    expect(firedAt - trigger.momentMs).toBeLessThan(50);
    expect(event.payload).toBe(trigger.moment);
  });

  it('fires once: the generator ends after its event', async () => {
    const events: unknown[] = [];
    for await (const event of new DateTimeTrigger({ moment: '2020-01-01T00:00:00Z' }).run()) {
      events.push(event.payload);
    }
    expect(events).toEqual(['2020-01-01T00:00:00.000Z']);
  });
});

describe('TimeDeltaTrigger', () => {
  it('serializes as a DateTimeTrigger at now + delta (seconds)', () => {
    const before = Date.now();
    const trigger = new TimeDeltaTrigger({ delta: 90 });
    const after = Date.now();
    const { classpath, kwargs } = trigger.serialize();
    expect(classpath).toBe('deferflow.triggers.DateTimeTrigger');
    expect(Object.keys(kwargs)).toEqual(['moment']);
    const moment = Date.parse(kwargs.moment as string);
    expect(moment).toBeGreaterThanOrEqual(before + 90_000);
    expect(moment).toBeLessThanOrEqual(after + 90_000);
    expect(trigger).toBeInstanceOf(DateTimeTrigger);
    // The triggerer rebuilds it as a plain DateTimeTrigger for the same moment.
    expect(new DateTimeTrigger(kwargs as { moment: string }).serialize()).toEqual(trigger.serialize());
  });

  it('accepts a luxon Duration', () => {
    const before = Date.now();
    const trigger = new TimeDeltaTrigger({ delta: Duration.fromObject({ minutes: 5, seconds: 30 }) });
    expect(trigger.momentMs - before).toBeGreaterThanOrEqual(330_000);
    expect(trigger.momentMs - before).toBeLessThan(330_000 + 1_000);
    expect(trigger.moment).toMatch(/Z$/);
  });

  it('as a start trigger, serializes a delay the scheduler counts from the task start, so the DAG serializes alike every time', async () => {
    const trigger = new TimeDeltaTrigger({ delta: 90, endFromTrigger: true });
    expect(trigger.serializeAsStartTrigger()).toEqual({
      classpath: 'deferflow.triggers.DateTimeTrigger',
      kwargs: { moment: { $nowPlus: 'PT90S' }, endFromTrigger: true },
    });
    expect(new TimeDeltaTrigger({ delta: Duration.fromObject({ months: 1 }) }).serializeAsStartTrigger().kwargs).toEqual({ moment: { $nowPlus: 'P1M' } });
    const rendered = renderStartTriggerKwargs(trigger.serializeAsStartTrigger().kwargs, Date.parse('2030-01-31T00:00:00Z'), 'dag');
    expect(rendered).toEqual({ moment: '2030-01-31T00:01:30.000Z', endFromTrigger: true });
    expect(renderStartTriggerKwargs({ moment: { $nowPlus: 'P1M' } }, Date.parse('2030-01-31T00:00:00Z'), 'dag')).toEqual({
      moment: '2030-02-28T00:00:00.000Z',
    });
  });

  it('fires at once for a zero delta', async () => {
    const event = await firstEvent(new TimeDeltaTrigger({ delta: 0 }));
    expect(typeof event.payload).toBe('string');
  });

  it('refuses a negative, non-finite or non-number delta and an invalid Duration, naming it', () => {
    expect(refusal(() => new TimeDeltaTrigger({ delta: -5 })).message).toMatch(/TimeDeltaTrigger: delta number -5 is negative/);
    expect(refusal(() => new TimeDeltaTrigger({ delta: Duration.fromObject({ hours: -1 }) })).message).toContain('PT-1H');
    expect(refusal(() => new TimeDeltaTrigger({ delta: Number.NaN })).message).toContain('NaN');
    expect(refusal(() => new TimeDeltaTrigger({ delta: Number.POSITIVE_INFINITY })).message).toContain('Infinity');
    expect(refusal(() => new TimeDeltaTrigger({ delta: '5' as never })).message).toContain('"5"');
    expect(refusal(() => new TimeDeltaTrigger({ delta: 1e300 })).message).toContain('1e+300');
    const invalid = refusal(() => new TimeDeltaTrigger({ delta: Duration.invalid('no such length') }));
    expect(invalid.message).toContain('invalid');
    expect(invalid.message).toContain('no such length');
  });

  it('has no classpath of its own and is not a built-in', () => {
    expect(Object.hasOwn(TimeDeltaTrigger, 'classpath')).toBe(false);
    expect(BUILTIN_TRIGGERS as readonly unknown[]).not.toContain(TimeDeltaTrigger);
  });
});
