import * as authoringApi from '../public-api.ts';
import { NotInTaskRunnerError } from '../../vocabulary/errors.ts';
import { type SharedEntry, shareWithUserCode } from './shared-modules.ts';

/**
 * The names of `deferflow` that are not in its authoring API (they open or use a database), by
 * how a task runner gives them to the DAG files it loads: a function that returns a promise is
 * wrapped, and loads the whole entry on its first call; openDatabase and Deferflow must be there
 * at once, so they are there only once something has loaded it. A test holds the three lists
 * against what src/index.ts exports.
 */
export const LOADED_ON_FIRST_CALL = [
  'latestSignalVersion',
  'listSignals',
  'listenSignal',
  'sendSignal',
  'deferTaskInstance',
  'resumeTaskInstance',
  'createTaskInstance',
  'readTaskInstance',
  'deferflow',
] as const;
export const LOADED_BY_OTHERS = ['openDatabase', 'Deferflow'] as const;

/**
 * Shares the entry points the worker names with the DAG files this task runner will load, each
 * as it says (see InTaskRunners): what a DAG file needs is loaded before the runner says it is
 * ready, and no database code is.
 */
export async function shareInTaskRunner(entries: readonly SharedEntry[]): Promise<void> {
  for (const { url, inTaskRunners } of entries) {
    if (inTaskRunners === 'whole') shareWithUserCode(url, await import(url));
    else if (inTaskRunners === 'authoring') shareWithUserCode(url, publicApiOnUse(url));
  }
}

/** `deferflow` as a task runner gives it: the authoring API, and the rest loaded from `url` (the whole entry) when first needed. */
function publicApiOnUse(url: string): object {
  let whole: Record<string, unknown> | null = null;
  let loading: Promise<Record<string, unknown>> | null = null;
  const load = () =>
    (loading ??= import(url).then((module: Record<string, unknown>) => {
      whole = module;
      return module;
    }));
  const api: Record<string, unknown> = { ...authoringApi };
  for (const name of LOADED_ON_FIRST_CALL) {
    api[name] = async (...args: unknown[]) => ((await load())[name] as (...args: unknown[]) => unknown)(...args);
  }
  for (const name of LOADED_BY_OTHERS) {
    Object.defineProperty(api, name, {
      enumerable: true,
      get() {
        if (whole === null) throw new NotInTaskRunnerError(name);
        return whole[name];
      },
    });
  }
  return Object.freeze(api);
}
