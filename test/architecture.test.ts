// Rules of the code's shape that review alone would let slip.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ENTRY, PACKAGE_TRIGGERS, REPO_ROOT } from './support/processes.ts';

const sources = (dir: string) =>
  readdirSync(path.join(REPO_ROOT, dir), { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith('.ts'))
    .map((file) => path.join(dir, file));

describe('the code', () => {
  it('keeps every SQL statement in src/storage (operations) and src/database (connections, dialects, migrations)', () => {
    const outside = sources('src')
      .filter((file) => !file.startsWith(path.join('src', 'storage')) && !file.startsWith(path.join('src', 'database')))
      .flatMap((file) =>
        readFileSync(path.join(REPO_ROOT, file), 'utf8')
          .split('\n')
          .flatMap((line, i) => (/\.(selectFrom|updateTable|insertInto|deleteFrom)\(|\bsql`/.test(line) ? [`${file}:${i + 1}: ${line.trim()}`] : [])),
      );
    expect(outside).toEqual([]);
  });

  it('runs its layers one way: CLI → composition (app, standalone) → daemons → what they share; daemons never import each other', () => {
    // Everything not named here (model, storage, db, dags, operators, triggers, jobs, config, …) is shared, below the daemons.
    const layerOf = (file: string): number => {
      const area = file.split(path.sep)[1]!;
      if (area === 'cli') return 3;
      if (area === 'app' || area === 'standalone') return 2;
      if (DAEMONS.includes(area)) return 1;
      return 0;
    };
    const DAEMONS = ['scheduler', 'worker', 'triggerer'];
    const wrong = sources('src')
      .filter((file) => file !== path.join('src', 'index.ts'))
      .flatMap((file) =>
        importsOf(file)
          .filter((target) => target.startsWith(`src${path.sep}`))
          .flatMap((target) => {
            const [from, to] = [layerOf(file), layerOf(target)];
            const sideways = from === 1 && to === 1 && file.split(path.sep)[1] !== target.split(path.sep)[1];
            return to > from || sideways ? [`${file} imports ${target}`] : [];
          }),
      );
    expect(wrong).toEqual([]);
  });

  it("builds the built-in triggers on the public API only, as a user's trigger is", () => {
    const reaching = sources('triggers').flatMap((file) =>
      importsOf(file)
        .filter((target) => target.startsWith(`src${path.sep}`) && target !== path.join('src', 'index.ts'))
        .map((target) => `${file} imports ${target}`),
    );
    expect(reaching).toEqual([]);
  });
});

describe('the built package', () => {
  it('loads the database drivers, metrics, pretty logs and cron parsing when they are used, not when its API is imported (every task runner imports it)', () => {
    const script = `import { createRequire } from 'node:module';
await import(${JSON.stringify(PACKAGE_ENTRY)});
await import(${JSON.stringify(PACKAGE_TRIGGERS)});
const cache = Object.keys(createRequire(import.meta.url).cache);
console.log(JSON.stringify(['pg', 'better-sqlite3', 'prom-client', 'pino-pretty', 'cron-parser'].filter((name) => cache.some((file) => file.includes('/node_modules/' + name + '/')))));`;
    const loaded = JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', script], { cwd: REPO_ROOT, encoding: 'utf8' })) as string[];
    expect(loaded).toEqual([]);
  });

  it("loads a CLI command's modules when that command runs: --help, --version and init load neither the database layer nor the compiler", () => {
    const scratch = mkdtempSync(path.join(os.tmpdir(), 'deferflow-cli-loads-'));
    try {
      // A module hook that writes down every module loaded (hooks run on their own thread: a file).
      const record = path.join(scratch, 'loaded.txt');
      writeFileSync(
        path.join(scratch, 'hook.mjs'),
        `import { appendFileSync } from 'node:fs';\nexport async function load(url, context, next) { appendFileSync(${JSON.stringify(record)}, url + '\\n'); return next(url, context); }\n`,
      );
      writeFileSync(path.join(scratch, 'register.mjs'), `import { register } from 'node:module';\nregister('./hook.mjs', import.meta.url);\n`);
      const loadedBy = (args: readonly string[]) => {
        rmSync(record, { force: true });
        execFileSync(process.execPath, ['--import', path.join(scratch, 'register.mjs'), path.join(REPO_ROOT, 'bin/deferflow.js'), ...args], {
          cwd: scratch,
          stdio: 'ignore',
        });
        return readFileSync(record, 'utf8');
      };
      const heavy = (loaded: string) => ['/node_modules/kysely/', '/node_modules/esbuild/', '/dist/src/storage/'].filter((part) => loaded.includes(part));
      expect(heavy(loadedBy(['--help']))).toEqual([]);
      expect(heavy(loadedBy(['--version']))).toEqual([]);
      expect(heavy(loadedBy(['init', 'project']))).toEqual([]);
      // The hook itself is seen working: a command that reads the database loads what it needs.
      const db = `sqlite:${path.join(scratch, 'x.db')}`;
      expect(heavy(loadedBy(['db', 'migrate', '--db', db]))).toEqual(['/node_modules/kysely/']);
      expect(heavy(loadedBy(['jobs', 'list', '--db', db]))).toEqual(['/node_modules/kysely/', '/dist/src/storage/']);
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  });
});

/**
 * The repository files `file` imports by relative path (packages and node: builtins left out),
 * statically or with `await import(...)` (the CLI loads a command's modules when it runs).
 */
function importsOf(file: string): string[] {
  const text = readFileSync(path.join(REPO_ROOT, file), 'utf8');
  const specifiers = [
    ...[...text.matchAll(/^(?:import|export)\s[^;]*?from\s+'(\.[^']+)'/gms)].map(([, specifier]) => specifier!),
    ...[...text.matchAll(/\bimport\(\s*'(\.[^']+)'\s*\)/g)].map(([, specifier]) => specifier!),
  ];
  return specifiers.map((specifier) => path.normalize(path.join(path.dirname(file), specifier)));
}
