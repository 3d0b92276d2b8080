import { statSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import Module from 'node:module';
import path from 'node:path';

/**
 * The user's own modules that their DAG files import: helpers, shared settings, a `lib/` folder
 * (CommonJS in the require cache, compiled by tsx or read by Node; not packages under
 * node_modules), reloaded once edited.
 *
 * Node keeps a required module for the life of the process. Without this, a scheduler, worker or
 * task runner that has imported a helper runs it as it first was, whatever the edits since, even
 * after the DAG file importing it is reloaded. So each local module a user file imports has its
 * mtime noted once that file has loaded (a DAG file's version includes them: see
 * dagFileVersion), and before a user file is loaded again the ones edited since, or gone, are
 * dropped from the require cache with every noted module importing one of them (which holds the
 * old exports), so the next require compiles them afresh. Modules that deferflow shares with user
 * code, and trigger modules (loaded once for the life of the process: see importUserModule), are
 * pinned: never dropped, and what they import is theirs.
 *
 * A module edited in the milliseconds between its compile and the note is noted with its new mtime
 * and keeps its old code until its next edit.
 */
export function noteLocalImports(module: Module): string[] {
  const found = new Set<string>();
  const visit = (parent: Module) => {
    for (const child of parent.children) {
      const file = child.filename;
      if (found.has(file) || pinned.has(file) || !isLocal(file)) continue;
      found.add(file);
      if (!noted.has(file)) noted.set(file, mtimeOf(file));
      visit(child);
    }
  };
  visit(module);
  return [...found].sort();
}

/** Drops from the require cache the local modules edited (or removed) since they were noted, and the noted modules that import them. */
export function dropEditedLocalModules(): void {
  const stale = new Set<string>();
  for (const [file, mtime] of noted) if (mtimeOf(file) !== mtime) stale.add(file);
  if (stale.size === 0) return;
  const cache = Module.createRequire(import.meta.url).cache;
  // Whoever imports a stale module, directly or not, is stale too: it holds the old exports.
  for (let grew = true; grew; ) {
    grew = false;
    for (const file of noted.keys()) {
      if (stale.has(file)) continue;
      if (cache[file]?.children.some((child) => stale.has(child.filename))) {
        stale.add(file);
        grew = true;
      }
    }
  }
  for (const file of stale) {
    delete cache[file];
    noted.delete(file);
  }
}

/** Marks `file` as a module user code shares for the life of the process: never dropped, never a local import. */
export function pinModule(file: string): void {
  pinned.add(file);
}

/**
 * The mtimes of `files` (local imports, see noteLocalImports), in whole microseconds, for a
 * version string: -1 for one that is gone. `seen` keeps them for the next call (one pass over
 * a DAG folder looks at a helper once).
 */
export async function localImportMtimes(files: readonly string[], seen: LocalImportMtimes = new Map()): Promise<number[]> {
  return Promise.all(
    files.map((file) => {
      let mtime = seen.get(file);
      if (mtime === undefined) {
        mtime = stat(file).then(
          ({ mtimeMs }) => Math.round(mtimeMs * 1000),
          () => -1,
        );
        seen.set(file, mtime);
      }
      return mtime;
    }),
  );
}

/** Local imports' mtimes as looked at once (see localImportMtimes). */
export type LocalImportMtimes = Map<string, Promise<number>>;

const noted = new Map<string, number>();
const pinned = new Set<string>();
const NODE_MODULES = `${path.sep}node_modules${path.sep}`;

function isLocal(file: string): boolean {
  // A native addon cannot be loaded twice into one process.
  return !file.includes(NODE_MODULES) && !file.endsWith('.node');
}

function mtimeOf(file: string): number {
  try {
    return statSync(file).mtimeMs;
  } catch {
    return -1;
  }
}
