import Module from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { pinModule } from './local-modules.ts';

/**
 * Hands one of deferflow's public entry points, already loaded in this process, to the user code
 * this process loads: a DAG file or trigger module that imports `deferflow` (or
 * `deferflow/triggers`) from the same installation gets this very module.
 *
 * Why: user files are compiled to CommonJS (see importUserModule), and under tsx's require hooks
 * a `require` of deferflow's ES modules compiles a second copy of the whole library, which costs
 * a quarter of a second of CPU and its memory in every process that loads a DAG (each task runner
 * process among them), and gives the file classes that are not the runtime's own. Node's require
 * cache is checked before any hook, and entries may be added to it (documented under
 * `require.cache`). A DAG importing another installation of deferflow still gets that one.
 */
export function shareWithUserCode(moduleUrl: string, namespace: object, inTaskRunners: InTaskRunners = 'whole'): void {
  if (!shared.some((entry) => entry.url === moduleUrl)) shared.push({ url: moduleUrl, inTaskRunners });
  const file = fileURLToPath(moduleUrl);
  pinModule(file);
  const cache = Module.createRequire(file).cache;
  if (cache[file] !== undefined) return;
  const module = new Module(file);
  module.filename = file;
  module.exports = namespace;
  module.paths = (Module as unknown as { _nodeModulePaths(dir: string): string[] })._nodeModulePaths(path.dirname(file));
  module.loaded = true;
  cache[file] = module;
}

/**
 * How a task runner process shares an entry point with the DAG files it loads (see
 * task-runner-api.ts): `whole`, the module itself, loaded before the runner is ready;
 * `authoring`, the public entry's authoring API (authoring/public-api.ts), the rest of it loaded on
 * first use; `on-use`, not loaded at all (a file that requires it compiles its own copy: the
 * lower-level entry, which DAG files rarely need, would cost every runner its start time).
 */
export type InTaskRunners = 'whole' | 'authoring' | 'on-use';

/** An entry point shared in this process, and how a task runner it starts shares it. */
export interface SharedEntry {
  readonly url: string;
  readonly inTaskRunners: InTaskRunners;
}

const shared: SharedEntry[] = [];

/**
 * The entry points shared in this process, in the order they were: a process this one starts to
 * run user code (a task runner) loads them before the user's files, as each says, and so shares
 * them too.
 */
export function sharedEntries(): readonly SharedEntry[] {
  return shared;
}
