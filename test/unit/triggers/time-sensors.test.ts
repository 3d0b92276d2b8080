import { describe, expect, it } from 'vitest';
import { DateTimeSensor, TimeDeltaSensor, TimeSensor } from '../../../triggers/index.ts';

describe('time sensors refuse bad options when the DAG loads, naming class and field', () => {
  it.each([
    [() => new TimeSensor({ taskId: 't', targetTime: '25:00' }), 'TimeSensor: targetTime: expected a time of day "HH:mm" or "HH:mm:ss", got "25:00"'],
    [() => new TimeSensor({ taskId: 't', targetTime: '09:30', timezone: 'Mars/Olympus' }), 'TimeSensor: timezone: "Mars/Olympus" is not an IANA time zone'],
    [
      () => new TimeDeltaSensor({ taskId: 't', delta: 'soon' as never }),
      'TimeDeltaSensor: delta: expected a luxon Duration or a number of seconds, got "soon"',
    ],
    [() => new DateTimeSensor({ taskId: 't', targetTime: '2030-01-01T00:00:00' }), 'DateTimeSensor: targetTime: DateTimeTrigger:'],
    [
      () => new TimeSensor({ taskId: 't', targetTime: '09:30', mode: 'later' as never }),
      'TimeSensor: mode: expected one of poke, reschedule, deferrable, got "later"',
    ],
  ])('%#', (make, message) => {
    let thrown: unknown = null;
    try {
      make();
    } catch (error) {
      thrown = error;
    }
    expect((thrown as { code?: string } | null)?.code).toBe('DF_INVALID_SENSOR');
    expect((thrown as Error).message).toContain(message);
  });
});
