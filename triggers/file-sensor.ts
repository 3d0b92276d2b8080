import path from 'node:path';
import { BaseSensorOperator, type SensorOptions } from '../src/authoring/sensors/base-sensor.ts';
import { PokeReturnValue } from '../src/authoring/sensors/poke-result.ts';
import type { JsonValue } from '../src/vocabulary/serialization/json.ts';
import { FileTrigger, readyFile } from './file-trigger.ts';
import { checkSensorOptions } from './sensor-option-error.ts';

export interface FileSensorOptions extends SensorOptions {
  /** A file path or a glob (FileTrigger's rules); relative paths resolve against the working directory when the DAG loads. */
  readonly filepath: string;
  /** `**` matches any number of directories. @default false */
  readonly recursive?: boolean;
  /** Done only once the file holds at least this many bytes. @default 0 */
  readonly minSize?: number;
  /** Done only once the file has not been modified for this many seconds (a half-written file is not done). @default 0 */
  readonly unchangedFor?: number;
}

/**
 * Waits for a file (Airflow's FileSensor): done when a regular file exists at `filepath`, or
 * matches it as a glob, with at least `minSize` bytes and no change for `unchangedFor` seconds.
 * Its return value is `{ path }`, the file found. In deferrable mode (or switched by
 * --smart-sensors) it waits on a FileTrigger with the same checks, so sensors waiting on the same
 * file share one trigger row.
 */
export class FileSensor extends BaseSensorOperator {
  static readonly classpath = 'deferflow.sensors.FileSensor';
  readonly filepath: string;
  readonly recursive: boolean;
  readonly minSize: number;
  readonly unchangedFor: number;

  constructor({ filepath, recursive = false, minSize = 0, unchangedFor = 0, ...options }: FileSensorOptions) {
    super(options);
    // The trigger checks every kwarg, naming it: build one now so a bad one fails the DAG's load.
    checkSensorOptions('FileSensor', () => new FileTrigger({ path: filepath, recursive, minSize, unchangedFor }));
    this.filepath = path.resolve(filepath);
    this.recursive = recursive;
    this.minSize = minSize;
    this.unchangedFor = unchangedFor;
  }

  async poke(): Promise<boolean | PokeReturnValue> {
    const found = await readyFile(this.filepath, this);
    return found === undefined ? false : new PokeReturnValue(true, { path: found });
  }

  override trigger(): FileTrigger {
    return new FileTrigger({
      path: this.filepath,
      pollInterval: this.pokeIntervalMs / 1000,
      recursive: this.recursive,
      minSize: this.minSize,
      unchangedFor: this.unchangedFor,
    });
  }

  /** Deferred, it resumes with FileTrigger's event: `{ path }`, the same return value as a poke's. */
  override sensorDone(_context: unknown, event: JsonValue): JsonValue | undefined {
    return event ?? undefined;
  }
}
