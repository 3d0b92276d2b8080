import { readFile } from 'node:fs/promises';
import Module from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { UserCodeExitError } from '../../vocabulary/errors.ts';
import { compileAsThisProcessDoes, IMPORT_META_URL } from './compile-user-file.ts';
import { dropEditedLocalModules, noteLocalImports, pinModule } from './local-modules.ts';
import { moduleFormatOf } from './module-format.ts';
import { registerTypeScriptHooks, registerTypeScriptImportHooks } from './typescript-hooks.ts';

/**
 * Loads a user's file (a DAG file, a trigger module) of any flavour: `.ts`, `.mts`, `.cts`,
 * `.js`, `.mjs`, `.cjs`, written as an ES module or as CommonJS, whatever package.json sits
 * above it. Its imports resolve from its own folder, so `deferflow` and the user's other
 * packages come from the user's project.
 *
 * Why not just `import()`: Node never unloads an ES module, so a long-running worker that
 * re-imports an edited DAG file would keep every version of it (about 50 KB an edit, measured
 * by `npm run bench:reload`). Instead the file is compiled to a CommonJS module object that is
 * not kept in any cache: when the file changes, the old version is garbage once nothing uses
 * its DAG (compile-user-file.ts compiles it). A trigger module, loaded
 * once for the life of the process, is `shared`: kept in the require cache, so a DAG file that
 * imports it gets the same module rather than a second compilation.
 *
 * A file CommonJS cannot express (top-level await) or whose imports only resolve for `import`
 * (a package exporting no `require`/`default` condition) falls back to `import()`: it works
 * the same, but each edit of it costs memory until the process restarts.
 */
export async function importUserModule(file: string, version: string, options: { readonly shared?: boolean } = {}): Promise<UserModule> {
  await registerTypeScriptHooks();
  // A shared module is the one every user file's import of that file gets (and the other way
  // round). Two compilations of one file in a process, this one and tsx's for an import of it,
  // would also leave Node one source map per file name for both, so the stacks of one copy
  // would name the other's lines.
  const requireCache = Module.createRequire(file).cache;
  const loaded = options.shared ? requireCache[file] : undefined;
  if (loaded?.loaded) return { exports: exportsOf(loaded.exports), importedBecause: null, localImports: [] };
  const source = await readFile(file, 'utf8');
  const format = moduleFormatOf(file);
  const compiled = await compileAsThisProcessDoes(file, source);
  if (!('code' in compiled)) return { exports: await importAsEsModule(file, version), importedBecause: 'it uses top-level await', localImports: [] };
  const { code } = compiled;
  const module = new Module(file);
  module.filename = file;
  // Node's own resolution paths for a file in this folder: node_modules here and above.
  module.paths = (Module as unknown as { _nodeModulePaths(dir: string): string[] })._nodeModulePaths(path.dirname(file));
  // Decided before the file runs, so that its top-level code never runs twice (here, then again
  // under import()). What is only found out by loading (an imported module with top-level await)
  // fails at its require, which esbuild hoists above the file's own statements.
  const esmOnly = importOnlySpecifier(code, file);
  if (esmOnly !== null)
    return { exports: await importAsEsModule(file, version), importedBecause: `it imports ${esmOnly}, which only loads with import()`, localImports: [] };
  // What it requires now is compiled as it is now (see local-modules.ts).
  dropEditedLocalModules();
  const preamble = `${format === 'module' ? '"use strict";' : ''}var ${IMPORT_META_URL}=${JSON.stringify(pathToFileURL(file).href)};`;
  // The file runs now, with what it requires, synchronously: nothing else of the process runs
  // meanwhile, so a process.exit() called is the file's own (a script left in the DAG folder),
  // and it fails the load instead of ending the daemon (Python's sys.exit() is an exception that
  // Airflow's DAG parsing catches the same way).
  const exit = process.exit;
  process.exit = ((exitCode?: unknown) => {
    throw new UserCodeExitError(file, exitCode);
  }) as typeof process.exit;
  let failure: { error: unknown } | null = null;
  try {
    (module as unknown as { _compile(code: string, file: string): void })._compile(preamble + code, file);
  } catch (error) {
    failure = { error };
  } finally {
    // Before anything awaits: the process's own code may then run, and exit.
    process.exit = exit;
  }
  if (failure !== null) {
    const { error } = failure;
    if (!ESM_ONLY_IMPORT.has((error as { code?: unknown }).code as string)) throw error;
    return {
      exports: await importAsEsModule(file, version),
      importedBecause: `what it imports only loads with import() (${(error as Error).message.split('\n')[0]})`,
      localImports: [],
    };
  }
  module.loaded = true;
  if (options.shared) {
    requireCache[file] = module;
    pinModule(file);
    return { exports: exportsOf(module.exports), importedBecause: null, localImports: [] };
  }
  return { exports: exportsOf(module.exports), importedBecause: null, localImports: noteLocalImports(module) };
}

export interface UserModule {
  /** What the file exports: its named exports (a CommonJS file's module.exports properties). */
  readonly exports: Record<string, unknown>;
  /**
   * Why the file had to be loaded with import(), which Node keeps until the process exits (so
   * every edit of it costs memory); null when it was not.
   */
  readonly importedBecause: string | null;
  /**
   * The user's own modules it imports, directly or not (see local-modules.ts), sorted: an edit
   * of one is an edit of the file (dagFileVersion). Empty for a file loaded with import() (Node
   * never loads its imports again) and for a shared module.
   */
  readonly localImports: readonly string[];
}

/**
 * The first package `code` requires that has no export for require (only an `import`
 * condition), or null. Specifiers that do not resolve at all are left to fail when the file
 * runs, with Node's own error.
 */
function importOnlySpecifier(code: string, file: string): string | null {
  const resolver = Module.createRequire(file);
  for (const [, specifier] of code.matchAll(REQUIRE_CALL)) {
    try {
      resolver.resolve(specifier!);
    } catch (error) {
      if ((error as { code?: unknown }).code === 'ERR_PACKAGE_PATH_NOT_EXPORTED') return specifier!;
    }
  }
  return null;
}

/** A require of a literal specifier, as esbuild writes the imports it rewrites. */
const REQUIRE_CALL = /\brequire\("([^"]+)"\)/g;

/** Errors that mean "this file needs import() to load what it imports", not "this file is broken". */
const ESM_ONLY_IMPORT = new Set(['ERR_REQUIRE_ESM', 'ERR_REQUIRE_ASYNC_MODULE', 'ERR_PACKAGE_PATH_NOT_EXPORTED', 'ERR_REQUIRE_CYCLE_MODULE']);

async function importAsEsModule(file: string, version: string): Promise<Record<string, unknown>> {
  await registerTypeScriptImportHooks();
  // The version in the URL makes Node load the file afresh after an edit.
  return exportsOf(await import(`${pathToFileURL(file).href}?v=${version}`));
}

/**
 * A module's exports as one flat record: a CommonJS module imported as ESM puts module.exports
 * under `default`; a CommonJS file that sets module.exports to one value (a class, a DAG)
 * exports it as `default`.
 */
export function exportsOf(exports: unknown): Record<string, unknown> {
  if (!isRecord(exports)) return { default: exports };
  const fallback = exports.default;
  return isRecord(fallback) ? { ...fallback, ...exports } : exports;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  if (value === null || typeof value !== 'object') return false;
  const prototype = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}
