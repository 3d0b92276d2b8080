import { createHash } from 'node:crypto';
import { readdir, realpath, stat } from 'node:fs/promises';
import path from 'node:path';
import { describeThrown, TaskNotFoundError } from '../../vocabulary/errors.ts';
import { explainLoadFailure } from '../user-code/explain-load-failure.ts';
import { importUserModule, type UserModule } from '../user-code/user-module.ts';
import { type LocalImportMtimes, localImportMtimes } from '../user-code/local-modules.ts';
import { isDag, type Dag } from './dag.ts';

/** A DAG a folder's file defined. */
export interface LoadedDag {
  /** The DAG, as the file exported it (validated). */
  readonly dag: Dag;
  /** The absolute path of the file that defines it. */
  readonly fileloc: string;
}

/** A DAG file that could not be loaded, or a reason to know about one that was. */
export interface DagFileError {
  /** The absolute path of the file. */
  readonly fileloc: string;
  /** What went wrong, for a person: the error and where it was thrown in the file. */
  readonly message: string;
}

/** What loading a folder of DAG files found (see loadDagFolder). */
export interface DagFolder {
  /** Every valid DAG the folder's files define. */
  readonly dags: readonly LoadedDag[];
  /** Files that could not be loaded (or whose DAGs are invalid), with why; the others load. */
  readonly errors: readonly DagFileError[];
  /** Every DAG file found, loaded or not. */
  readonly files: readonly string[];
  /**
   * Loaded files Node keeps every version of until the process exits (loaded with import(), see
   * importUserModule), with why: each edit of one costs memory.
   */
  readonly unreloadable: readonly DagFileError[];
}

const DAG_FILE = /\.(ts|mts|cts|js|mjs|cjs)$/;

/**
 * Imports every DAG file under `folder` (recursively; names starting with `_` or `.`, and
 * node_modules, are skipped) and collects the Dag objects each exports, validated. A file that
 * fails to import, or defines an invalid DAG or a dag_id another file already defined, is
 * reported in `errors` and never stops the others. A file is loaded afresh when its mtime
 * changes, and the old version is not kept (see importUserModule). TypeScript and CommonJS files
 * load without a build step.
 */
export async function loadDagFolder(folder: string): Promise<DagFolder> {
  const files = await dagFiles(path.resolve(folder));
  const dags: LoadedDag[] = [];
  const errors: DagFileError[] = [];
  const unreloadable: DagFileError[] = [];
  const definedIn = new Map<string, string>();
  // Helpers many DAG files import are looked at once a pass.
  const mtimes: LocalImportMtimes = new Map();
  for (const fileloc of files) {
    let exports: Record<string, unknown>;
    try {
      const loaded = await importDagFile(fileloc, 0, mtimes);
      exports = loaded.exports;
      if (loaded.importedBecause !== null) unreloadable.push({ fileloc, message: loaded.importedBecause });
    } catch (error) {
      errors.push({ fileloc, message: `could not be loaded: ${explainLoadFailure(fileloc, error)}` });
      continue;
    }
    const found = [...new Set(Object.values(exports).filter(isDag))];
    const problems: string[] = [];
    for (const dag of found) {
      try {
        dag.validate();
      } catch (error) {
        problems.push(describeThrown(error).error);
        continue;
      }
      const earlier = definedIn.get(dag.dagId);
      if (earlier !== undefined) {
        problems.push(`DAG ${dag.dagId} is already defined in ${earlier}`);
        continue;
      }
      definedIn.set(dag.dagId, fileloc);
      dags.push({ dag, fileloc });
    }
    if (problems.length > 0) errors.push({ fileloc, message: problems.join('; ') });
  }
  return { dags, errors, files, unreloadable };
}

/** Imports one DAG file as it is now (its mtime and its local imports' are checked, so an edit of either is seen). */
async function importDagFile(fileloc: string, maxAgeMs = 0, mtimes?: LocalImportMtimes): Promise<UserModule> {
  // A worker imports a DAG file for every task it runs: unchanged files are served from here
  // (compiling one costs milliseconds), and a worker re-checks a file's mtime at most every maxAgeMs.
  const cached = imported.get(fileloc);
  if (cached && performance.now() - cached.checkedAt < maxAgeMs) return cached.module;
  const version = await dagFileVersion(fileloc, cached?.module.localImports, mtimes);
  if (cached?.version === version) {
    cached.checkedAt = performance.now();
    return cached.module;
  }
  const module = await importUserModule(fileloc, version);
  // Its version by what it imports now, which an edit may have changed.
  const loadedVersion = sameList(module.localImports, cached?.module.localImports) ? version : await dagFileVersion(fileloc, module.localImports);
  imported.set(fileloc, { version: loadedVersion, module, checkedAt: performance.now() });
  return module;
}

const imported = new Map<string, { version: string; module: UserModule; checkedAt: number }>();

/**
 * A DAG file's version as this process sees it now: its mtime, in whole microseconds, and its
 * inode (a link swapped to another checkout's file is another file, however close the two
 * mtimes: the kernel stamps files by a clock a few milliseconds coarse), and when it imports
 * modules of the user's own (`localImports`, as its last load found them: see local-modules.ts),
 * a digest of theirs, so that an edit of a helper is an edit of the DAG file.
 */
export async function dagFileVersion(fileloc: string, localImports: readonly string[] = [], mtimes?: LocalImportMtimes): Promise<string> {
  const { mtimeMs, ino } = await stat(fileloc);
  // Whole microseconds: a '.' in a module URL would read as a file extension to some loaders (vite).
  const own = `${Math.round(mtimeMs * 1000)}i${ino}`;
  if (localImports.length === 0) return own;
  const digest = createHash('sha1')
    .update(localImports.join('\n'))
    .update((await localImportMtimes(localImports, mtimes)).join(','))
    .digest('hex');
  return `${own}-${digest.slice(0, 12)}`;
}

function sameList(a: readonly string[], b: readonly string[] | undefined): boolean {
  return b !== undefined && a.length === b.length && a.every((item, index) => item === b[index]);
}

/** The version of `fileloc` this process last loaded (see loadDagFromFile) and the local modules it imports, if it has. */
export function loadedDagFile(fileloc: string): { readonly version: string; readonly localImports: readonly string[] } | undefined {
  const loaded = imported.get(fileloc);
  return loaded && { version: loaded.version, localImports: loaded.module.localImports };
}

/** How stale a worker's view of a DAG file may be: an edit is picked up by tasks starting this long after it. */
export const WORKER_RECHECK_MS = 1_000;

/** The DAG `dagId` as defined in `fileloc` now (as of at most a second ago), validated; throws, naming both, when it is not there. */
export async function loadDagFromFile(fileloc: string, dagId: string): Promise<Dag> {
  const { exports } = await importDagFile(fileloc, WORKER_RECHECK_MS);
  const dag = Object.values(exports).find((value): value is Dag => isDag(value) && value.dagId === dagId);
  if (!dag) throw new TaskNotFoundError(`${fileloc} no longer defines DAG ${dagId}`);
  // The same module (file unchanged) hands back the same Dag: validated once, not per task run.
  if (!validated.has(dag)) {
    dag.validate();
    validated.add(dag);
  }
  return dag;
}

const validated = new WeakSet<Dag>();

/**
 * The DAG files under `dir`, in name order, by their paths there. Symbolic links are followed, to
 * files and to folders: git-sync publishes each checkout by swapping a link to it, and Kubernetes
 * mounts a ConfigMap's files as links, so a walk that passed them by found no DAGs at all. Each
 * folder is walked once, by its real path (a link back up the tree ends there); a link to nothing,
 * as one may be for a moment during a swap, is passed by.
 */
async function dagFiles(dir: string, walked = new Set<string>()): Promise<string[]> {
  const real = await realpath(dir);
  if (walked.has(real)) return [];
  walked.add(real);
  const entries = await readdir(dir, { withFileTypes: true });
  const files: string[] = [];
  for (const entry of entries.sort((a, b) => (a.name < b.name ? -1 : 1))) {
    if (entry.name.startsWith('_') || entry.name.startsWith('.') || entry.name === 'node_modules') continue;
    const full = path.join(dir, entry.name);
    const target = entry.isSymbolicLink() ? await stat(full).catch(() => null) : entry;
    // A folder gone since it was listed (a swapped-out checkout being removed) is passed by too.
    if (target?.isDirectory())
      files.push(...(await dagFiles(full, walked).catch((error: NodeJS.ErrnoException) => (error.code === 'ENOENT' ? [] : Promise.reject(error)))));
    else if (target?.isFile() && DAG_FILE.test(entry.name) && !entry.name.endsWith('.d.ts')) files.push(full);
  }
  return files;
}
