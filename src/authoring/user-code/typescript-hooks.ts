import Module from 'node:module';

/**
 * Lets users' TypeScript load without a build step of theirs: what a DAG file or trigger module
 * `require`s or `import`s (`../triggers/countdown.ts`), and a file that falls back to import().
 * tsx's hooks are registered the first time user code is loaded, so a process that embeds
 * deferflow needs no `--import tsx` of its own; deferflow itself runs compiled and never needs them.
 *
 * Two halves. User files are compiled to CommonJS (see importUserModule), and what they import
 * becomes `require`: tsx's CommonJS hooks serve them, registered here. Its ES module hooks run in
 * a loader thread of their own, which costs a process about 90 ms of CPU and 17 MB (Node 20, this
 * project's machine; a third of a task runner's start): they are registered only once user code
 * will `import()` something, which is when a file or a package is loaded with import(), or when
 * CommonJS code about to run contains a dynamic `import(` (seen as each module is compiled, so
 * that its `import('./helper.ts')` resolves through them; a false match, in a string, only costs
 * the thread). Their API module is loaded here with the other's (their ES module builds share
 * most of their code), because registering them must then be synchronous.
 */
export function registerTypeScriptHooks(): Promise<void> {
  loading ??= (async () => {
    const [esm, cjs] = await Promise.all([import('tsx/esm/api'), import('tsx/cjs/api')]);
    cjs.register();
    registerImportHooks = () => {
      registerImportHooks = () => {};
      esm.register();
    };
    const prototype = Module.prototype as unknown as { _compile(code: string, file: string): unknown };
    const compile = prototype._compile;
    prototype._compile = function (this: unknown, code: string, file: string) {
      if (code.includes('import(')) registerImportHooks();
      return compile.call(this, code, file);
    };
  })();
  return loading;
}

/** Both halves of registerTypeScriptHooks: before user code is loaded with `import()`. */
export async function registerTypeScriptImportHooks(): Promise<void> {
  await registerTypeScriptHooks();
  registerImportHooks();
}

let loading: Promise<void> | null = null;
let registerImportHooks = () => {};
