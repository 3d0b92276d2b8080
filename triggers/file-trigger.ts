import path from 'node:path';
import { describeValue } from './date-time-trigger.ts';
import { findFirstFile, hasMagic, isRegularFile, splitGlob, segmentToRegExp } from './glob.ts';
import { InvalidTriggerArgumentError, BaseTrigger, type SerializedTrigger, TriggerEvent } from '../src/index.ts';

export interface FileTriggerKwargs {
  /** A file path or a glob (see ./glob.ts); relative paths resolve against the current directory when constructed. */
  path: string;
  /** Seconds between checks. Default 5. */
  pollInterval?: number;
  /** `**` matches any number of directories (as Python's glob recursive=True). Default false: `**` is `*`. */
  recursive?: boolean;
}

const DEFAULT_POLL_INTERVAL_S = 5;

/**
 * Fires when a regular file exists at `path`, or when any regular file matches the glob `path`,
 * with the event payload `{ path: <absolute path of the file found> }`. It checks at once, then
 * every `pollInterval` seconds (through the triggerer's shared timer queue).
 *
 * The path is made absolute when the trigger is constructed (the operator's working directory),
 * so the triggerer does not depend on its own; serialize() gives it absolute with the defaults
 * filled in, so equal waits share one trigger row.
 */
export class FileTrigger extends BaseTrigger {
  static readonly classpath = 'deferflow.triggers.FileTrigger';

  readonly path: string;
  readonly pollInterval: number;
  readonly recursive: boolean;

  constructor(kwargs: FileTriggerKwargs) {
    super();
    if (kwargs === null || typeof kwargs !== 'object') {
      throw invalid(`expected kwargs { path, pollInterval?, recursive? }, got ${describeValue(kwargs)}`);
    }
    for (const key in kwargs) {
      if (key !== 'path' && key !== 'pollInterval' && key !== 'recursive') {
        throw invalid(`unknown kwarg ${JSON.stringify(key)} (the kwargs are path, pollInterval, recursive)`);
      }
    }
    const { path: given, pollInterval = DEFAULT_POLL_INTERVAL_S, recursive = false } = kwargs;
    if (typeof given !== 'string' || given === '' || given.includes('\0')) {
      throw invalid(`path ${describeValue(given)} is not a usable path; pass a non-empty file path or glob, e.g. "/data/in/*.csv"`);
    }
    if (typeof pollInterval !== 'number' || !Number.isFinite(pollInterval) || pollInterval <= 0) {
      throw invalid(`pollInterval ${describeValue(pollInterval)} is not a positive number of seconds; pass e.g. 5 or 0.5`);
    }
    if (typeof recursive !== 'boolean') {
      throw invalid(`recursive ${describeValue(recursive)} is not a boolean; pass true or false`);
    }
    const absolute = path.resolve(given);
    if (hasMagic(absolute)) {
      for (const segment of splitGlob(absolute, { recursive }).segments) {
        if (recursive && segment === '**') continue;
        try {
          segmentToRegExp(segment);
        } catch (error) {
          throw invalid(`path ${JSON.stringify(given)} is not a valid glob (segment ${JSON.stringify(segment)}: ${(error as Error).message})`);
        }
      }
    }
    this.path = absolute;
    this.pollInterval = pollInterval;
    this.recursive = recursive;
  }

  override serialize(): SerializedTrigger {
    return {
      classpath: FileTrigger.classpath,
      kwargs: { path: this.path, pollInterval: this.pollInterval, recursive: this.recursive },
    };
  }

  override async *run(signal: AbortSignal): AsyncGenerator<TriggerEvent<{ path: string }>, void, void> {
    const glob = hasMagic(this.path);
    for (;;) {
      signal.throwIfAborted();
      const found = glob ? await findFirstFile(this.path, { recursive: this.recursive }) : (await isRegularFile(this.path)) ? this.path : undefined;
      if (found !== undefined) {
        yield new TriggerEvent({ path: found });
        return;
      }
      await this.sleep(this.pollInterval * 1000);
    }
  }
}

function invalid(message: string): InvalidTriggerArgumentError {
  return new InvalidTriggerArgumentError('FileTrigger', message);
}
