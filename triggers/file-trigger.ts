import { stat } from 'node:fs/promises';
import path from 'node:path';
import { describeValue } from './date-time-trigger.ts';
import { findFirstFile, hasMagic, isRegularFile, splitGlob, segmentToRegExp } from './glob.ts';
import { InvalidTriggerArgumentError } from '../src/vocabulary/errors.ts';
import { BaseTrigger, type SerializedTrigger } from '../src/authoring/triggers/base-trigger.ts';
import { TriggerEvent } from '../src/authoring/triggers/trigger-event.ts';

export interface FileTriggerKwargs {
  /** A file path or a glob (see ./glob.ts); relative paths resolve against the current directory when constructed. */
  path: string;
  /** Seconds between checks. Default 5. */
  pollInterval?: number;
  /** `**` matches any number of directories (as Python's glob recursive=True). Default false: `**` is `*`. */
  recursive?: boolean;
  /** Fire only once the file holds at least this many bytes. Default 0. */
  minSize?: number;
  /**
   * Fire only once the file has not been modified for this many seconds (its mtime is that old):
   * a file still being written does not fire. Default 0.
   */
  unchangedFor?: number;
}

export interface FileCheck {
  readonly recursive: boolean;
  readonly minSize: number;
  readonly unchangedFor: number;
}

/**
 * The file `pattern` names (a path, or the first match of a glob in name order) when it is a
 * regular file of at least minSize bytes, unmodified for unchangedFor seconds; else undefined.
 * What FileTrigger checks on each poll and FileSensor on each poke.
 */
export async function readyFile(pattern: string, check: FileCheck, now = Date.now()): Promise<string | undefined> {
  const found = hasMagic(pattern) ? await findFirstFile(pattern, { recursive: check.recursive }) : pattern;
  if (found === undefined) return undefined;
  if (check.minSize === 0 && check.unchangedFor === 0) return (await isRegularFile(found)) ? found : undefined;
  const stats = await stat(found).catch(() => null);
  if (!stats?.isFile() || stats.size < check.minSize || now - stats.mtimeMs < check.unchangedFor * 1000) return undefined;
  return found;
}

const DEFAULT_POLL_INTERVAL_S = 5;
const KWARGS = ['path', 'pollInterval', 'recursive', 'minSize', 'unchangedFor'];

/**
 * Fires when a regular file exists at `path`, or when any regular file matches the glob `path`
 * (the first in name order: see readyFile; with minSize and unchangedFor, once it is that big
 * and has not been modified for that long, so a half-written file does not fire), with the event payload `{ path: <absolute path of the file found> }`. It checks at once, then
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
  readonly minSize: number;
  readonly unchangedFor: number;

  constructor(kwargs: FileTriggerKwargs) {
    super();
    if (kwargs === null || typeof kwargs !== 'object') {
      throw invalid(`expected kwargs { path, pollInterval?, recursive? }, got ${describeValue(kwargs)}`);
    }
    for (const key in kwargs) {
      if (!KWARGS.includes(key)) throw invalid(`unknown kwarg ${JSON.stringify(key)} (the kwargs are ${KWARGS.join(', ')})`);
    }
    const { path: given, pollInterval = DEFAULT_POLL_INTERVAL_S, recursive = false, minSize = 0, unchangedFor = 0 } = kwargs;
    if (typeof given !== 'string' || given === '' || given.includes('\0')) {
      throw invalid(`path ${describeValue(given)} is not a usable path; pass a non-empty file path or glob, e.g. "/data/in/*.csv"`);
    }
    if (typeof pollInterval !== 'number' || !Number.isFinite(pollInterval) || pollInterval <= 0) {
      throw invalid(`pollInterval ${describeValue(pollInterval)} is not a positive number of seconds; pass e.g. 5 or 0.5`);
    }
    if (typeof recursive !== 'boolean') {
      throw invalid(`recursive ${describeValue(recursive)} is not a boolean; pass true or false`);
    }
    if (typeof minSize !== 'number' || !Number.isSafeInteger(minSize) || minSize < 0) {
      throw invalid(`minSize ${describeValue(minSize)} is not a number of bytes; pass a whole number, 0 or more`);
    }
    if (typeof unchangedFor !== 'number' || !Number.isFinite(unchangedFor) || unchangedFor < 0) {
      throw invalid(`unchangedFor ${describeValue(unchangedFor)} is not a number of seconds; pass 0 or more, e.g. 30`);
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
    this.minSize = minSize;
    this.unchangedFor = unchangedFor;
  }

  override serialize(): SerializedTrigger {
    return {
      classpath: FileTrigger.classpath,
      // The checks only when set: a plain wait serializes (and dedups) as it always did.
      kwargs: {
        path: this.path,
        pollInterval: this.pollInterval,
        recursive: this.recursive,
        ...(this.minSize === 0 ? {} : { minSize: this.minSize }),
        ...(this.unchangedFor === 0 ? {} : { unchangedFor: this.unchangedFor }),
      },
    };
  }

  override async *run(signal: AbortSignal): AsyncGenerator<TriggerEvent<{ path: string }>, void, void> {
    for (;;) {
      signal.throwIfAborted();
      const found = await readyFile(this.path, this);
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
