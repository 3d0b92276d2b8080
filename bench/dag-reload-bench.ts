/**
 * DAG reload benchmark: what a long-running worker's memory does when a DAG file is edited
 * again and again. Writes a DAG file (20 tasks, a 20 KB constant) into a project outside the
 * repository, then N times: edits it, loads the DAG folder as the worker does, and every N/5
 * edits collects garbage and samples memory.
 *
 *   npm run bench:reload [-- --edits N]
 *
 * Runs twice: a plain DAG file (compiled to a collectable CommonJS module), and the same file
 * with a top-level await (which only import() can load, and Node never unloads). Prints one
 * JSON line per run: flavour, edits, heap_start_mb, heap_end_mb, heap_per_edit_kb, rss_end_mb.
 */
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { loadDagFolder } from '../src/authoring/dags/loader.ts';

const args = await yargs(hideBin(process.argv)).option('edits', { type: 'number', default: 1000, describe: 'N: edits of the DAG file' }).strict().parse();

const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with node --expose-gc (npm run bench:reload does)');

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const project = mkdtempSync(path.join(os.tmpdir(), 'deferflow-reload-'));
try {
  mkdirSync(path.join(project, 'node_modules'));
  symlinkSync(repo, path.join(project, 'node_modules/deferflow'), 'dir');
  writeFileSync(path.join(project, 'package.json'), JSON.stringify({ type: 'module' }));
  for (const flavour of ['commonjs-compiled', 'es-module (top-level await)'] as const) {
    const dags = path.join(project, flavour.startsWith('es') ? 'esm-dags' : 'dags');
    mkdirSync(dags);
    const file = path.join(dags, 'edited.ts');
    const constant = JSON.stringify('x'.repeat(20_000));
    const samples: { heap: number; rss: number }[] = [];
    for (let edit = 0; edit <= args.edits; edit++) {
      writeFileSync(
        file,
        `import { Dag, FunctionOperator } from 'deferflow';
${flavour.startsWith('es') ? 'await Promise.resolve();' : ''}
const note: string = ${constant} + ${edit};
export const dag = new Dag({ dagId: 'edited' }).add(...Array.from({ length: 20 }, (_, i) => new FunctionOperator({ taskId: 't' + i, fn: () => note.length })));
`,
      );
      // A distinct mtime per edit, as real edits seconds apart have.
      const mtime = new Date(Date.UTC(2026, 0, 1) + edit * 1000);
      utimesSync(file, mtime, mtime);
      const loaded = await loadDagFolder(dags);
      if (loaded.dags.length !== 1) throw new Error(`edit ${edit}: ${JSON.stringify(loaded.errors)}`);
      // Let finalizers and weak references settle between loads, as the worker's loop does.
      await new Promise((resolve) => setImmediate(resolve));
      if (edit % Math.max(1, Math.floor(args.edits / 5)) === 0) {
        gc();
        const usage = process.memoryUsage();
        samples.push({ heap: usage.heapUsed, rss: usage.rss });
      }
    }
    const first = samples[0]!;
    const last = samples.at(-1)!;
    console.log(
      JSON.stringify({
        flavour,
        edits: args.edits,
        heap_start_mb: +(first.heap / 1e6).toFixed(1),
        heap_end_mb: +(last.heap / 1e6).toFixed(1),
        heap_per_edit_kb: +((last.heap - first.heap) / args.edits / 1e3).toFixed(1),
        rss_end_mb: +(last.rss / 1e6).toFixed(1),
      }),
    );
  }
} finally {
  rmSync(project, { recursive: true, force: true });
}
