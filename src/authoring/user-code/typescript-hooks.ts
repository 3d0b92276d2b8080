/**
 * Lets users' TypeScript load without a build step of theirs: what a DAG file or trigger module
 * `require`s or `import`s (`../triggers/countdown.ts`), and a file that falls back to import().
 * tsx's hooks are registered once, the first time user code is loaded, so a process that embeds
 * deferflow needs no `--import tsx` of its own; deferflow itself runs compiled and never needs them.
 */
export function registerTypeScriptHooks(): Promise<void> {
  registering ??= (async () => {
    const [esm, cjs] = await Promise.all([import('tsx/esm/api'), import('tsx/cjs/api')]);
    esm.register();
    cjs.register();
  })();
  return registering;
}

let registering: Promise<void> | null = null;
