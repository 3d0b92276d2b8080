import path from 'node:path';
import { createFilesMatcher, getTsconfig, parseTsconfig, type TsConfigJsonResolved } from 'get-tsconfig';

/**
 * Compiles a user's file (a DAG file, a trigger module) to the CommonJS that importUserModule
 * runs: esbuild (already what tsx runs) strips the types and rewrites import/export, and the
 * inline source map keeps stack traces pointing at the user's lines. The project's tsconfig.json
 * settings that change what code does (`experimentalDecorators`, `useDefineForClassFields`, …)
 * apply as they do to the modules the file imports, which tsx compiles (see projectTsconfig).
 */
export async function compileUserFile(file: string, source: string): Promise<CompiledUserFile> {
  const { transform } = await import('esbuild');
  const compilerOptions = projectTsconfig()?.(file)?.compilerOptions;
  try {
    const { code } = await transform(source, {
      ...(compilerOptions && { tsconfigRaw: JSON.stringify({ compilerOptions }) }),
      loader: /\.[cm]?ts$/.test(file) ? 'ts' : 'js',
      format: 'cjs',
      platform: 'node',
      target: `node${process.versions.node.split('.')[0]}`,
      sourcemap: 'inline',
      sourcefile: file,
      // An ES module's import.meta, as CommonJS can give it (importUserModule defines the variable).
      define: { 'import.meta.url': IMPORT_META_URL, 'import.meta.filename': '__filename', 'import.meta.dirname': '__dirname' },
    });
    return { code };
  } catch (error) {
    if (TOP_LEVEL_AWAIT.test(String((error as Error).message))) return { topLevelAwait: true };
    throw error;
  }
}

/**
 * Which project tsconfig.json applies to a file, as tsx decides for the modules it compiles: the
 * one found from the working directory upwards (or at TSX_TSCONFIG_PATH), for the files it
 * includes. Read once per process, as tsx reads it.
 */
function projectTsconfig(): ((file: string) => TsConfigJsonResolved | undefined) | null {
  if (tsconfigMatcher === undefined) {
    const explicit = process.env.TSX_TSCONFIG_PATH;
    const found = explicit ? { path: path.resolve(explicit), config: parseTsconfig(path.resolve(explicit)) } : getTsconfig(process.cwd());
    tsconfigMatcher = found === null ? null : createFilesMatcher(found);
  }
  return tsconfigMatcher;
}

let tsconfigMatcher: ((file: string) => TsConfigJsonResolved | undefined) | null | undefined;

/** A user file compiled: its CommonJS code, or that CommonJS cannot express it (top-level await: it needs import()). */
export type CompiledUserFile = { readonly code: string } | { readonly topLevelAwait: true };

export type UserFileCompiler = (file: string, source: string) => Promise<CompiledUserFile>;

/**
 * How this process compiles user files: itself by default. A task runner asks its worker instead
 * (see task-runner-main.ts), which compiles each file once for all its runners: a runner then
 * needs no esbuild service process of its own (about 12 MB beside each runner) and its first
 * task of a DAG does not wait for one to start.
 */
export function compileUserFilesWith(compiler: UserFileCompiler): void {
  userFileCompiler = compiler;
}

/** Compiles `file` (whose text is `source`) as this process does (see compileUserFilesWith). */
export function compileAsThisProcessDoes(file: string, source: string): Promise<CompiledUserFile> {
  return userFileCompiler(file, source);
}

let userFileCompiler: UserFileCompiler = compileUserFile;

/** The variable compiled code reads `import.meta.url` from. */
export const IMPORT_META_URL = '__deferflow_import_meta_url';
const TOP_LEVEL_AWAIT = /Top-level await is currently not supported with the "cjs" output format/;
