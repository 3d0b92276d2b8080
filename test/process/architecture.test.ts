// Rules of the code's shape that review alone would let slip.
//
// The layers of src/, bottom to top: each top-level folder is one layer, and a file imports only
// from its own layer and those below it. docs/architecture.md says the same, in the same order.
//   vocabulary  the words every layer uses: errors and their codes, JSON, durations and pauses,
//               logging, option parsing, packages loaded when used, the helper thread.
//   database    connections, the dialects (every SQLite/PostgreSQL difference), migrations and the
//               schema's types, commit notifications, encryption at rest.
//   model       deferflow's rules with no I/O: schedules, trigger rules, retries, signal actions.
//   authoring   what users write and what runs it: operators, triggers, sensors, DAGs,
//               connections, loading users' modules. (The built-in triggers in triggers/ are
//               written on this layer as a user's are, and only the app and the package load them.)
//   storage     every SQL operation, one per file, and the state machines they enforce.
//   services    what the daemons share: the job lifecycle, signals, DAG processing, task and
//               trigger logs, metrics and health, the deferral helpers.
//   daemons     the triggerer, the worker and the scheduler (which never import each other) and
//               the options all three share.
//   app         composition: the embedded API (deferflow()), standalone, the status page.
//   cli         the commands, mapping flags and environment variables onto the options below.
// The package's two entries sit between app and cli: src/index.ts (`deferflow`, for authors and
// embedders) and src/internals.ts (`deferflow/internals`, the lower level) gather the public API
// from every layer up to the app; the CLI loads the first when a command runs user code, so that
// this code gets that very module.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ENTRY, PACKAGE_TRIGGERS, REPO_ROOT } from '../support/processes.ts';

const LAYERS = ['vocabulary', 'database', 'model', 'authoring', 'storage', 'services', 'daemons', 'app', 'cli'] as const;
const DAEMONS = ['triggerer', 'worker', 'scheduler'];

const sources = (dir: string) =>
  readdirSync(path.join(REPO_ROOT, dir), { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith('.ts'))
    .map((file) => path.join(dir, file));

/** A file's place in the order: its layer's index; the built-ins just above authoring; migrations with the database; the entry between app and cli. */
function levelOf(file: string): number {
  const [top, area] = file.split(path.sep);
  if (top === 'triggers') return LAYERS.indexOf('authoring') + 0.5;
  if (top === 'migrations') return LAYERS.indexOf('database');
  if (file === path.join('src', 'index.ts') || file === path.join('src', 'internals.ts')) return LAYERS.indexOf('app') + 0.5;
  const level = LAYERS.indexOf(area as (typeof LAYERS)[number]);
  if (level < 0) throw new Error(`${file} is in no layer`);
  return level;
}

const CODE = [...sources('src'), ...sources('triggers'), ...sources('migrations')];

describe('the code', () => {
  it("has one layer per top-level folder of src/, and no other module there but the package's two entries", () => {
    const entries = readdirSync(path.join(REPO_ROOT, 'src'), { withFileTypes: true });
    expect(
      entries
        .filter((entry) => entry.isDirectory())
        .map((entry) => entry.name)
        .sort(),
    ).toEqual([...LAYERS].sort());
    expect(
      entries
        .filter((entry) => entry.isFile())
        .map((entry) => entry.name)
        .sort(),
    ).toEqual(['index.ts', 'internals.ts']);
  });

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

  it(`runs its layers one way (${LAYERS.join(' → ')}): no import, not even of a type, runs up; daemons never import each other`, () => {
    const wrong = CODE.flatMap((file) =>
      importsOf(file).flatMap(({ target }) => {
        const up = levelOf(target) > levelOf(file);
        const [from, to] = [file.split(path.sep), target.split(path.sep)];
        const sideways = from[1] === 'daemons' && to[1] === 'daemons' && DAEMONS.includes(from[2]!) && DAEMONS.includes(to[2]!) && from[2] !== to[2];
        return up || sideways ? [`${file} imports ${target}`] : [];
      }),
    );
    expect(wrong).toEqual([]);
  });

  it('has no import cycle, but between files of one folder that import only types from each other', () => {
    const graph = new Map(CODE.map((file) => [file, importsOf(file)]));
    const runtime = cyclesOf(new Map([...graph].map(([file, targets]) => [file, targets.filter((edge) => !edge.typeOnly).map((edge) => edge.target)])));
    expect(runtime).toEqual([]);
    const acrossFolders = cyclesOf(new Map([...graph].map(([file, targets]) => [file, targets.map((edge) => edge.target)]))).filter(
      (cycle) => new Set(cycle.map((file) => path.dirname(file))).size > 1,
    );
    expect(acrossFolders).toEqual([]);
  });

  it("builds the built-in triggers on the modules they need, never on the package's entry (which loads them)", () => {
    const throughEntry = sources('triggers').flatMap((file) =>
      importsOf(file)
        .filter(({ target }) => target === path.join('src', 'index.ts'))
        .map(({ target }) => `${file} imports ${target}`),
    );
    expect(throughEntry).toEqual([]);
  });

  it('is described in docs/architecture.md layer by layer, in the same order', () => {
    const doc = readFileSync(path.join(REPO_ROOT, 'docs/architecture.md'), 'utf8');
    const headed = [...doc.matchAll(/^#{2,3} \d+\. `src\/([a-z]+)\/`/gm)].map(([, layer]) => layer);
    expect(headed).toEqual([...LAYERS]);
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
      // A module hook that writes down every ES module loaded (hooks run on their own thread: a
      // file), and at exit every CommonJS module in the require cache (the SQLite driver).
      const record = path.join(scratch, 'loaded.txt');
      writeFileSync(
        path.join(scratch, 'hook.mjs'),
        `import { appendFileSync } from 'node:fs';\nexport async function load(url, context, next) { appendFileSync(${JSON.stringify(record)}, url + '\\n'); return next(url, context); }\n`,
      );
      writeFileSync(
        path.join(scratch, 'register.mjs'),
        `import { register, createRequire } from 'node:module';\nimport { appendFileSync } from 'node:fs';\nregister('./hook.mjs', import.meta.url);\nprocess.on('exit', () => appendFileSync(${JSON.stringify(record)}, Object.keys(createRequire(import.meta.url).cache).join('\\n') + '\\n'));\n`,
      );
      const loadedBy = (args: readonly string[]) => {
        rmSync(record, { force: true });
        execFileSync(process.execPath, ['--import', path.join(scratch, 'register.mjs'), path.join(REPO_ROOT, 'bin/deferflow.js'), ...args], {
          cwd: scratch,
          stdio: 'ignore',
        });
        const loaded = readFileSync(record, 'utf8');
        // kysely is in the bundle, tree-shaken (scripts/build.ts): its own builds are ~260 files each, which cost ~0.1–0.24 s of CPU to load.
        expect(loaded).not.toContain('/node_modules/kysely/');
        return loaded;
      };
      const heavy = (loaded: string) => ['/node_modules/better-sqlite3/', '/node_modules/esbuild/'].filter((part) => loaded.includes(part));
      expect(heavy(loadedBy(['--help']))).toEqual([]);
      expect(heavy(loadedBy(['--version']))).toEqual([]);
      expect(heavy(loadedBy(['init', 'project']))).toEqual([]);
      // The hooks are seen working: a command that reads the database loads what it needs.
      const db = `sqlite:${path.join(scratch, 'x.db')}`;
      expect(heavy(loadedBy(['db', 'migrate', '--db', db]))).toEqual(['/node_modules/better-sqlite3/']);
      expect(heavy(loadedBy(['jobs', 'list', '--db', db]))).toEqual(['/node_modules/better-sqlite3/']);
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  });
});

interface ImportEdge {
  readonly target: string;
  /** `import type`/`export type`, or every name marked `type`: gone once compiled. */
  readonly typeOnly: boolean;
}

/**
 * The repository files `file` imports by relative path (packages and node: builtins left out),
 * statically or with `await import(...)` (the CLI loads a command's modules when it runs). Paths
 * in text (a project template's imports) that name no file are left out.
 */
function importsOf(file: string): ImportEdge[] {
  const text = readFileSync(path.join(REPO_ROOT, file), 'utf8');
  const edges = [
    ...[...text.matchAll(/^(?:import|export)(\s+type)?\s([^;]*?)from\s+'(\.[^']+)'/gms)].map(([, typeKeyword, names, specifier]) => ({
      specifier: specifier!,
      typeOnly: typeKeyword !== undefined || onlyTypes(names!),
    })),
    ...[...text.matchAll(/\bimport\(\s*'(\.[^']+)'\s*\)/g)].map(([, specifier]) => ({ specifier: specifier!, typeOnly: false })),
  ];
  return edges
    .map(({ specifier, typeOnly }) => ({ target: path.normalize(path.join(path.dirname(file), specifier)), typeOnly }))
    .filter(({ target }) => existsSync(path.join(REPO_ROOT, target)));
}

/** Whether the braces of `import { … }` name only types (`{ type A, type B }`). */
function onlyTypes(names: string): boolean {
  const inside = /^\{([^}]*)\}$/.exec(names.trim())?.[1];
  const parts =
    inside
      ?.split(',')
      .map((part) => part.trim())
      .filter((part) => part !== '') ?? [];
  return parts.length > 0 && parts.every((part) => part.startsWith('type '));
}

/** The cycles of a graph: its strongly connected components of more than one file (Tarjan). */
function cyclesOf(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const visit = (file: string) => {
    index.set(file, counter);
    low.set(file, counter++);
    stack.push(file);
    onStack.add(file);
    for (const target of graph.get(file) ?? []) {
      if (!graph.has(target) || target === file) continue;
      if (!index.has(target)) {
        visit(target);
        low.set(file, Math.min(low.get(file)!, low.get(target)!));
      } else if (onStack.has(target)) {
        low.set(file, Math.min(low.get(file)!, index.get(target)!));
      }
    }
    if (low.get(file) === index.get(file)) {
      const component: string[] = [];
      let member: string;
      do {
        member = stack.pop()!;
        onStack.delete(member);
        component.push(member);
      } while (member !== file);
      if (component.length > 1) cycles.push(component.sort());
    }
  };
  for (const file of graph.keys()) if (!index.has(file)) visit(file);
  return cycles;
}
