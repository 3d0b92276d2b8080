/**
 * What encryption at rest costs the triggerer benchmark: triggerer-bench.ts run in pairs, one
 * run in plain then one with --encrypt, `--runs` pairs, so that both see the machine in the same
 * state. On a machine whose runs of the same code differ by 20% (see the README), one pair says
 * little; the medians of five pairs or more are what the README quotes.
 *
 *   npm run bench:encryption -- [--db postgres://…] [--triggers N] [--runs PAIRS] [--distinct-events]
 *
 * Prints each run's JSON line (with "encrypted"), then one JSON summary:
 *   runs                    pairs measured
 *   distinct_events         whether each trigger's event was its own (--distinct-events)
 *   plain, encrypted        per figure (insert_ms, load_ms, fire_p50_ms, fire_p99_ms, rss_per_trigger_bytes):
 *                           the median and [lowest, highest] of its runs
 *   cost_percent            per figure: encrypted median / plain median − 1, in percent
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';

const args = await yargs(hideBin(process.argv))
  .option('db', { type: 'string', describe: 'postgres://… (a private schema per run; default: a new SQLite file per run)' })
  .option('triggers', { type: 'number', default: 100_000, describe: 'N: deferred task instances, one trigger each' })
  .option('runs', { type: 'number', default: 5, describe: 'pairs of runs (plain, then encrypted)' })
  .option('distinct-events', { type: 'boolean', default: false, describe: "each trigger's event its own (see triggerer-bench.ts)" })
  .strict()
  .parse();
if (!Number.isInteger(args.runs) || args.runs < 1) throw new Error(`--runs must be a whole number of pairs, at least 1; got ${args.runs}`);
// Each run needs an empty database: a SQLite file given here would hold the previous run's rows.
if (args.db && !/^postgres(ql)?:\/\//.test(args.db))
  throw new Error(`--db must be a postgres:// URL (each run gets a schema of its own); leave it out for SQLite, which gets a new file per run`);

const FIGURES = ['insert_ms', 'load_ms', 'fire_p50_ms', 'fire_p99_ms', 'rss_per_trigger_bytes'] as const;
type Figure = (typeof FIGURES)[number];
type Run = Record<Figure, number> & { encrypted: boolean };

const benchScript = path.join(path.dirname(fileURLToPath(import.meta.url)), 'triggerer-bench.ts');
const runs: { plain: Run[]; encrypted: Run[] } = { plain: [], encrypted: [] };
for (let pair = 0; pair < args.runs; pair++) {
  for (const encrypted of [false, true]) {
    const run = await benchRun(encrypted);
    process.stdout.write(`${JSON.stringify(run)}\n`);
    (encrypted ? runs.encrypted : runs.plain).push(run);
  }
}

const summary = (list: Run[]) => Object.fromEntries(FIGURES.map((figure) => [figure, spread(list.map((run) => run[figure]))]));
process.stdout.write(
  `${JSON.stringify({
    runs: args.runs,
    distinct_events: args['distinct-events'],
    plain: summary(runs.plain),
    encrypted: summary(runs.encrypted),
    cost_percent: Object.fromEntries(
      FIGURES.map((figure) => {
        const plain = median(runs.plain.map((run) => run[figure]));
        return [figure, Math.round((median(runs.encrypted.map((run) => run[figure])) / plain - 1) * 1000) / 10];
      }),
    ),
  })}\n`,
);

/** One run of triggerer-bench.ts, in a process of its own as `npm run bench` runs it. */
async function benchRun(encrypted: boolean): Promise<Run> {
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      benchScript,
      '--triggers',
      String(args.triggers),
      ...(args.db ? ['--db', args.db] : []),
      ...(encrypted ? ['--encrypt'] : []),
      ...(args['distinct-events'] ? ['--distinct-events'] : []),
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  // 'close', not 'exit': only then has all of its output been read.
  const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
  const last = output.trim().split('\n').pop() ?? '';
  if (code !== 0) throw new Error(`triggerer-bench.ts${encrypted ? ' --encrypt' : ''} exited with ${code}; its output ended: ${last}`);
  return JSON.parse(last) as Run;
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

function spread(values: readonly number[]): { median: number; range: [number, number] } {
  return { median: median(values), range: [Math.min(...values), Math.max(...values)] };
}
