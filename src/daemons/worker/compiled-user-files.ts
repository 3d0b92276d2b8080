import { type CompiledUserFile, compileUserFile } from '../../authoring/user-code/compile-user-file.ts';

/**
 * A worker's compilations of the user files its task runners load (see compileUserFilesWith):
 * each file compiled once for all of them, as the text a runner read; an edited file is
 * compiled afresh, and only its latest text is kept. A file that does not compile keeps its
 * error until it is edited (compiling it again would fail the same way).
 */
export class CompiledUserFiles {
  readonly #latest = new Map<string, { readonly source: string; readonly compiled: Promise<CompiledUserFile> }>();

  compile(file: string, source: string): Promise<CompiledUserFile> {
    const known = this.#latest.get(file);
    if (known?.source === source) return known.compiled;
    const compiled = compileUserFile(file, source);
    this.#latest.set(file, { source, compiled });
    return compiled;
  }
}
