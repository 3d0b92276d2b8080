// Users' own files in every flavour Node knows, loaded from a folder outside the repository; a
// file that cannot load names the fix.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { dropTestDatabases } from '../support/databases.ts';
import { processScratch } from '../support/process-scratch.ts';
import { PACKAGE_ENTRY, RUNNER_PROCESSES, spawnDeferflow } from '../support/processes.ts';

afterAll(dropTestDatabases);
const scratch = processScratch();
const entry = JSON.stringify(PACKAGE_ENTRY);

const TRIGGER_CTS = `import { BaseTrigger, TriggerEvent, type SerializedTrigger } from ${entry};
export class CountdownTrigger extends BaseTrigger {
  static readonly classpath = 'legacy.CountdownTrigger';
  constructor(readonly kwargs: { from: number }) { super(); }
  serialize(): SerializedTrigger { return { classpath: CountdownTrigger.classpath, kwargs: this.kwargs }; }
  async *run(): AsyncGenerator<TriggerEvent<{ steps: number }>> {
    for (let left = this.kwargs.from; left > 0; left--) await this.sleep(20);
    yield new TriggerEvent({ steps: this.kwargs.from });
  }
}
`;
const DAG_CTS = `import { BaseOperator, Dag, type RuntimeContext } from ${entry};
import { CountdownTrigger } from '../triggers/countdown.cts';
class Countdown extends BaseOperator<RuntimeContext> {
  execute(): never { return this.defer({ trigger: new CountdownTrigger({ from: 2 }), method: 'counted' }); }
  counted(_context: RuntimeContext, event: { steps: number }) { return { steps: event.steps, url: import.meta.url }; }
}
export const dag = new Dag({ dagId: 'typed_cts' }).add(new Countdown({ taskId: 'count' }));
`;
const DAG_CJS = `const { Dag, FunctionOperator } = require(${entry});
module.exports = new Dag({ dagId: 'plain_cjs' }).add(new FunctionOperator({ taskId: 'hello', fn: () => require('node:path').basename(__filename) }));
`;
// ES module syntax and TypeScript in a .ts file that Node would read as CommonJS (no "type": "module").
const DAG_TS = `import { Dag, FunctionOperator } from ${entry};
const greeting: string = 'from ts';
export const dag = new Dag({ dagId: 'esm_syntax_ts' }).add(new FunctionOperator({ taskId: 'hello', fn: () => greeting }));
`;

/** A user's project outside the repository: its package.json (an ES module package unless `type` says otherwise) and these folders in it. */
function userProject(name: string, folders: readonly string[], type: 'module' | 'commonjs' = 'module'): string {
  const project = scratch.dir(name);
  writeFileSync(path.join(project, 'package.json'), JSON.stringify(type === 'module' ? { name, type } : { name }));
  for (const folder of folders) mkdirSync(path.join(project, folder));
  return project;
}

describe('user files', () => {
  it('.cts, .cjs and a .ts outside an ESM package load as DAG files and trigger modules, and run', async () => {
    const db = await scratch.database('sqlite');
    // A CommonJS project: its package.json has no "type": "module".
    const project = userProject('commonjs-project', ['dags', 'triggers'], 'commonjs');
    writeFileSync(path.join(project, 'triggers/countdown.cts'), TRIGGER_CTS);
    writeFileSync(path.join(project, 'dags/typed.cts'), DAG_CTS);
    writeFileSync(path.join(project, 'dags/plain.cjs'), DAG_CJS);
    writeFileSync(path.join(project, 'dags/esm-syntax.ts'), DAG_TS);
    for (const dagId of ['typed_cts', 'plain_cjs', 'esm_syntax_ts']) {
      const run = spawnDeferflow(
        ['standalone', '--db', db.url, '--dags', './dags', '--trigger-module', './triggers/countdown.cts', '--trigger-dag', dagId, '--exit-when-done'],
        {},
        project,
      );
      const exit = await run.exit;
      expect(exit.code, `${run.text.join('\n')}\n${run.stderr.join('\n')}`).toBe(0);
      expect(run.text.join('\n')).toMatch(new RegExp(`${dagId} manual__\\S+: success in `));
    }
    const rows = await db.db.selectFrom('task_instance').select(['dag_id', 'state', 'return_value']).orderBy('dag_id').execute();
    expect(rows.map((r) => [r.dag_id, r.state, JSON.parse(r.return_value!)])).toEqual([
      ['esm_syntax_ts', 'success', 'from ts'],
      ['plain_cjs', 'success', 'plain.cjs'],
      ['typed_cts', 'success', { steps: 2, url: `file://${path.join(project, 'dags/typed.cts')}` }],
    ]);
  }, 90_000);

  it('a DAG file importing a package that only loads with import() runs its top-level code once, and the worker says it is not reloadable', async () => {
    const db = await scratch.database('sqlite');
    const project = userProject('esm-only-import', ['dags']);
    // A package with no export for require: only the "import" condition.
    const pkg = path.join(project, 'node_modules/import-only');
    mkdirSync(pkg, { recursive: true });
    writeFileSync(path.join(pkg, 'package.json'), JSON.stringify({ name: 'import-only', type: 'module', exports: { import: './index.js' } }));
    writeFileSync(path.join(pkg, 'index.js'), `export const word = 'imported';\n`);
    writeFileSync(
      path.join(project, 'dags/import-only.ts'),
      `import { appendFileSync } from 'node:fs';\nimport { Dag, FunctionOperator } from ${entry};\nimport { word } from 'import-only';\n` +
        `appendFileSync(${JSON.stringify(path.join(project, 'loads.txt'))}, process.pid + '\\n');\n` +
        `export const dag = new Dag({ dagId: 'import_only' }).add(new FunctionOperator({ taskId: 'hello', fn: () => word }));\n`,
    );
    const run = spawnDeferflow(
      ['standalone', '--db', db.url, '--dags', './dags', '--trigger-dag', 'import_only', '--exit-when-done'],
      RUNNER_PROCESSES,
      project,
    );
    const exit = await run.exit;
    expect(exit.code, `${run.text.join('\n')}\n${run.stderr.join('\n')}`).toBe(0);
    const row = await db.db.selectFrom('task_instance').select(['state', 'return_value']).executeTakeFirstOrThrow();
    expect([row.state, JSON.parse(row.return_value!)]).toEqual(['success', 'imported']);
    const warnings = run.stderr.filter((line) => line.includes('is loaded with import() because it imports import-only'));
    expect(warnings, run.stderr.join('\n')).toHaveLength(1);
    // Loaded once per process: by the DAG processor in the worker, and by the runner process that
    // ran the task; no process runs the file twice.
    const loads = readFileSync(path.join(project, 'loads.txt'), 'utf8').trim().split('\n');
    expect(loads).toHaveLength(2);
    expect(new Set(loads).size).toBe(2);
    expect(loads[0]).toBe(String(run.pid));
  }, 60_000);

  it('TypeScript that user code loads with import() as it runs loads in a runner, from the DAG file itself or from a module it imports', async () => {
    const db = await scratch.database('sqlite');
    const project = userProject('runtime-import', ['dags', 'lib']);
    writeFileSync(path.join(project, 'lib/shout.ts'), `export const shout = (word: string): string => word.toUpperCase();\n`);
    // Imported statically by a DAG file with no import() of its own: the import() is in this module only.
    writeFileSync(
      path.join(project, 'lib/later.ts'),
      `export async function later(word: string): Promise<string> {\n  const { shout } = await import('./shout.ts');\n  return shout(word);\n}\n`,
    );
    writeFileSync(
      path.join(project, 'dags/direct.ts'),
      `import { BaseOperator, Dag } from ${entry};\nclass Direct extends BaseOperator {\n  async execute(): Promise<string> {\n    const { shout } = await import('../lib/shout.ts');\n    return shout('direct');\n  }\n}\n` +
        `export const dag = new Dag({ dagId: 'direct_import' }).add(new Direct({ taskId: 'shout' }));\n`,
    );
    writeFileSync(
      path.join(project, 'dags/nested.ts'),
      `import { BaseOperator, Dag } from ${entry};\nimport { later } from '../lib/later.ts';\nclass Nested extends BaseOperator {\n  execute(): Promise<string> {\n    return later('nested');\n  }\n}\n` +
        `export const dag = new Dag({ dagId: 'nested_import' }).add(new Nested({ taskId: 'shout' }));\n`,
    );
    for (const dagId of ['direct_import', 'nested_import']) {
      const run = spawnDeferflow(['standalone', '--db', db.url, '--dags', './dags', '--trigger-dag', dagId, '--exit-when-done'], RUNNER_PROCESSES, project);
      const exit = await run.exit;
      expect(exit.code, `${run.text.join('\n')}\n${run.stderr.join('\n')}`).toBe(0);
    }
    const rows = await db.db.selectFrom('task_instance').select(['dag_id', 'state', 'return_value']).orderBy('dag_id').execute();
    expect(rows.map((r) => [r.dag_id, r.state, JSON.parse(r.return_value!)])).toEqual([
      ['direct_import', 'success', 'DIRECT'],
      ['nested_import', 'success', 'NESTED'],
    ]);
  }, 60_000);

  it("compiles DAG files with the project's tsconfig.json, as the modules they import are: legacy decorators", async () => {
    const db = await scratch.database('sqlite');
    const project = userProject('tsconfig-decorators', ['dags', 'lib']);
    writeFileSync(
      path.join(project, 'tsconfig.json'),
      JSON.stringify({ compilerOptions: { target: 'ES2022', module: 'NodeNext', experimentalDecorators: true } }),
    );
    // A legacy (experimentalDecorators) method decorator: (target, key, descriptor); TC39 decorators get (value, context).
    writeFileSync(
      path.join(project, 'lib/tagged.ts'),
      `export function tagged(_target: object, _key: string, descriptor: PropertyDescriptor): void {\n  const original = descriptor.value;\n  descriptor.value = function (this: unknown) { return 'tagged:' + original.call(this); };\n}\n`,
    );
    writeFileSync(
      path.join(project, 'dags/decorated.ts'),
      `import { BaseOperator, Dag } from ${entry};\nimport { tagged } from '../lib/tagged.js';\nclass Greeter extends BaseOperator {\n  @tagged\n  execute(): string { return 'hello'; }\n}\n` +
        `export const dag = new Dag({ dagId: 'decorated' }).add(new Greeter({ taskId: 'greet' }));\n`,
    );
    // The project's own tsconfig.json, found from the working directory as a user's run finds it
    // (spawned tests otherwise point tsx at the repository's: see processes.ts).
    const run = spawnDeferflow(
      ['standalone', '--db', db.url, '--dags', './dags', '--trigger-dag', 'decorated', '--exit-when-done'],
      { ...RUNNER_PROCESSES, TSX_TSCONFIG_PATH: '' },
      project,
    );
    const exit = await run.exit;
    expect(exit.code, `${run.text.join('\n')}\n${run.stderr.join('\n')}`).toBe(0);
    const row = await db.db.selectFrom('task_instance').select(['state', 'return_value']).executeTakeFirstOrThrow();
    expect([row.state, JSON.parse(row.return_value!)]).toEqual(['success', 'tagged:hello']);
  }, 60_000);

  it('a DAG file that calls process.exit() while it loads is an import error: the daemon goes on and the other DAGs run', async () => {
    const db = await scratch.database('sqlite');
    const project = userProject('exiting-script', ['dags']);
    writeFileSync(path.join(project, 'dags/good.ts'), DAG_TS.replace('esm_syntax_ts', 'good'));
    // A script left in the DAG folder: its top level ends the process (loaded after good.ts).
    writeFileSync(path.join(project, 'dags/script.ts'), `console.log('migrating');\nprocess.exit(3);\n`);
    const run = spawnDeferflow(['standalone', '--db', db.url, '--dags', './dags', '--trigger-dag', 'good', '--exit-when-done'], {}, project);
    const exit = await run.exit;
    expect(exit.code, `${run.text.join('\n')}\n${run.stderr.join('\n')}`).toBe(0);
    const row = await db.db.selectFrom('task_instance').select(['dag_id', 'state']).executeTakeFirstOrThrow();
    expect(row).toEqual({ dag_id: 'good', state: 'success' });
    const list = spawnDeferflow(['dags', 'list', '--db', db.url, '--json'], {}, project);
    expect((await list.exit).code).toBe(0);
    const listed = JSON.parse(list.text.join('\n')) as { import_errors: { fileloc: string; message: string }[] };
    expect(listed.import_errors).toEqual([
      { fileloc: path.join(project, 'dags/script.ts'), message: expect.stringContaining('called process.exit(3) while it loaded') },
    ]);
  }, 60_000);

  it('a file whose project lacks deferflow is reported with the fix', async () => {
    const db = await scratch.database('sqlite');
    const dir = scratch.dir('user-code');
    writeFileSync(path.join(dir, 'uninstalled.mts'), `import { Dag } from 'deferflow';\nexport const dag = new Dag({ dagId: 'uninstalled' });\n`);
    // Run from the user's folder, as they would: from the repository, tsx would map 'deferflow' through its tsconfig.json.
    const reserialize = spawnDeferflow(['dags', 'reserialize', '--db', db.url, '--dags', dir], {}, dir);
    expect((await reserialize.exit).code).toBe(1);
    expect(reserialize.text.join('\n')).toContain(
      `deferflow is not installed where uninstalled.mts can find it: run \`npm install deferflow\` in the project that holds ${path.join(dir, 'uninstalled.mts')}`,
    );
  }, 60_000);
});
