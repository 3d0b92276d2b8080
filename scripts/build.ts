/**
 * The package build (`npm run build`): tsc writes the declarations (dist/**.d.ts, what `types`
 * and the exports' `types` name), esbuild the JavaScript, bundled.
 *
 * Why bundled: every deferflow process (each command, daemon and task runner) spent most of its
 * start in Node's ES module loader resolving, reading and compiling the package's compiled files
 * one by one: `deferflow dags list` loaded 178 of them and took 0.65 s of CPU; bundled, it loads
 * 30 and takes 0.50 s (measured on the 2-core machine, 2026-11-29, four runs each). Bundling
 * with code splitting keeps what made the files separate: each command's handler still loads only
 * what it needs (a dynamic import becomes a chunk), and every entry shares the chunks, so a DAG
 * file importing `deferflow` gets the very classes the worker running it uses.
 *
 * The layout: every entry and chunk is in dist/src/bundle/. The few modules that find a file from
 * their own URL (index.ts its entry files, errors.ts and status-pages.ts the package's own stack
 * frames, process-task-runner.ts the runner's entry) find it from there as from src/. The
 * package's entry files (dist/src/index.js, dist/src/internals.js, dist/triggers/index.js)
 * re-export their bundle entries, so users' imports and the exports map are unchanged.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build, type Plugin } from 'esbuild';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const dist = path.join(root, 'dist');

/** Each bundle entry: its source, its name in dist/src/bundle/, and the package file that re-exports it (if any). */
const ENTRIES = [
  { source: 'src/index.ts', name: 'index', packageFile: 'src/index.js' },
  { source: 'src/internals.ts', name: 'internals', packageFile: 'src/internals.js' },
  { source: 'triggers/index.ts', name: 'triggers', packageFile: 'triggers/index.js' },
  // bin/deferflow.js and bin/triggerer.js
  { source: 'src/cli/main.ts', name: 'cli', packageFile: null },
  // What a worker forks to run task code (see process-task-runner.ts).
  { source: 'src/daemons/worker/task-runner-main.ts', name: 'task-runner-main', packageFile: null },
] as const;

/** The bundle's folder, relative to dist/. */
export const BUNDLE_DIR = 'src/bundle';

/**
 * Dependencies stay external (they are the user's installed packages: native builds, optional
 * peers, pino's worker files), except kysely, whose ES module build is bundled, tree-shaken, in
 * place of the CommonJS build src/database/kysely.ts loads when run from the sources: loading
 * kysely's ~260 CommonJS files cost a process that opens a database ~0.1 s of CPU at start.
 */
const bundledKysely: Plugin = {
  name: 'bundled-kysely',
  setup(build) {
    // The module becomes a re-export of the names it takes from kysely (named, so that the bundle
    // keeps only what they reach: destructuring the namespace would keep 22 more of its modules).
    const kyselyModule = path.join(root, 'src/database/kysely.ts');
    build.onLoad({ filter: /[/\\]src[/\\]database[/\\]kysely\.ts$/ }, async (args) => {
      if (args.path !== kyselyModule) return undefined;
      const names = /^export const \{([^}]+)\} = kysely;$/m.exec(await readFile(args.path, 'utf8'))?.[1];
      if (names === undefined) throw new Error(`${args.path} no longer exports \`const { … } = kysely\`: update scripts/build.ts`);
      return { loader: 'ts', contents: `export {${names}} from 'kysely';` };
    });
    build.onResolve({ filter: /^[^./]/ }, (args) =>
      args.path === 'kysely' || args.path.startsWith('kysely/') ? undefined : { path: args.path, external: true },
    );
  },
};

/** Builds the package into dist/ (removing what an earlier build left there). */
export async function buildPackage(): Promise<void> {
  rmSync(dist, { recursive: true, force: true });
  try {
    execFileSync(process.execPath, [path.join(root, 'node_modules/typescript/bin/tsc'), '-p', path.join(root, 'tsconfig.build.json')], {
      cwd: root,
      stdio: 'pipe',
    });
  } catch (error) {
    const output = (error as { stdout?: Buffer }).stdout?.toString() ?? '';
    throw new Error(`writing the declarations (tsc -p tsconfig.build.json) failed:\n${output}`);
  }
  await build({
    absWorkingDir: root,
    entryPoints: ENTRIES.map((entry) => ({ in: entry.source, out: `${BUNDLE_DIR}/${entry.name}` })),
    outdir: dist,
    chunkNames: `${BUNDLE_DIR}/chunk-[hash]`,
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    plugins: [bundledKysely],
    // No source maps: the bundle is readable as it is (not minified, names kept), and with maps a
    // process where tsx has turned source maps on (any that loads a TypeScript DAG file) parses
    // each chunk's map as it loads it and reports deferflow's frames at paths outside the package
    // (src/…), where the user's frames are told from deferflow's (errors.ts, status-pages.ts).
    sourcemap: false,
    // Class and function names stay as written: error codes, logs and trigger classpaths print them.
    keepNames: true,
    logLevel: 'warning',
  });
  for (const entry of ENTRIES) {
    if (entry.packageFile === null) continue;
    const file = path.join(dist, entry.packageFile);
    const target = path.relative(path.dirname(file), path.join(dist, BUNDLE_DIR, `${entry.name}.js`));
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, `// The package entry: its code is bundled (see scripts/build.ts).\nexport * from './${target}';\n`);
  }
}

if (process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await buildPackage();
}
