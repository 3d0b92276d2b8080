// A long-running worker reloads an edited DAG file: the versions it replaced must be garbage,
// not kept for the life of the process (import() kept every one: Node never unloads an ES module).
import { execFile } from 'node:child_process';
import { mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { processScratch } from '../support/process-scratch.ts';
import { REPO_ROOT } from '../support/processes.ts';

const run = promisify(execFile);
const scratch = processScratch();

// Loads the folder after each of 30 edits, holding only a WeakRef to each version's Dag, then
// collects garbage and counts the versions still alive (the current one must be).
const SCRIPT = `
import { utimesSync, writeFileSync } from 'node:fs';
import { loadDagFolder } from 'deferflow/internals';
const [dags, topLevelAwait] = [process.argv[2], process.argv[3] === 'tla'];
const file = dags + '/edited.ts';
const versions = [];
for (let edit = 0; edit < 30; edit++) {
  writeFileSync(file, \`import { Dag } from 'deferflow';\\n\${topLevelAwait ? 'await 0;' : ''}\\nexport const dag = new Dag({ dagId: 'edited', description: 'edit \${edit}' });\\n\`);
  const mtime = new Date(Date.UTC(2026, 0, 1) + edit * 1000);
  utimesSync(file, mtime, mtime);
  const loaded = await loadDagFolder(dags);
  if (loaded.dags.length !== 1) throw new Error(JSON.stringify(loaded.errors));
  versions.push(new WeakRef(loaded.dags[0].dag));
}
for (let round = 0; round < 5; round++) {
  await new Promise((resolve) => setImmediate(resolve));
  globalThis.gc();
}
console.log(JSON.stringify({ alive: versions.flatMap((ref, edit) => (ref.deref() === undefined ? [] : [edit])), current: versions.at(-1).deref()?.options?.description }));
`;

describe('reloading an edited DAG file', () => {
  it('keeps only the current version of the DAG; a file with top-level await (import() only) keeps every one', async () => {
    const project = scratch.dir('reload');
    mkdirSync(path.join(project, 'node_modules'));
    symlinkSync(REPO_ROOT, path.join(project, 'node_modules/deferflow'), 'dir');
    writeFileSync(path.join(project, 'package.json'), JSON.stringify({ type: 'module' }));
    writeFileSync(path.join(project, 'reload.mjs'), SCRIPT);
    const outcome = async (flavour: string) => {
      const dags = path.join(project, `dags-${flavour}`);
      mkdirSync(dags);
      // Plain node: deferflow registers tsx itself when it first loads user code (the TLA file falls back to import() of a .ts).
      const { stdout } = await run(process.execPath, ['--expose-gc', 'reload.mjs', dags, flavour], { cwd: project });
      return JSON.parse(stdout) as { alive: number[]; current: string };
    };
    const plain = await outcome('plain');
    expect(plain.current).toBe('edit 29');
    // The first version may stay: the first module to require a package remains its module.parent
    // in Node's require cache. One version, whatever the number of edits; none in between.
    expect(plain.alive.filter((edit) => edit !== 0)).toEqual([29]);
    // The documented exception, shown so that the assertion above is known to be able to fail.
    const esModule = await outcome('tla');
    expect(esModule).toEqual({ alive: Array.from({ length: 30 }, (_, edit) => edit), current: 'edit 29' });
  }, 60_000);
});
