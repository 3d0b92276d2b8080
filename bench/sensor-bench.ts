// Sensors at scale: TIS sensor task instances waiting on DISTINCT target files that appear at
// staggered moments over about SPREAD seconds, 8 worker slots, run in each mode. Prints one JSON
// line per mode.
//
//   npm run bench:sensors [-- --tis 2000 --targets 50 --spread 60 --poke-interval 5 --db URL]
//
// - poke: each sensor holds a slot until its file appears. Run on a fraction of the TIs (POKE_TIS,
//   same targets) and scaled to TIS: slot_seconds and pokes say "scaled", as measured x factor.
// - reschedule: slots are given back between pokes.
// - deferrable: each sensor defers onto the consolidated poke (SensorPokeTrigger): one trigger row
//   and one poke per interval per distinct target.
// - smart: the same DAG as poke mode, switched with --smart-sensors (no DAG change).
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { deferflow } from '../src/index.ts';
import { fromDbTime, parseDatabaseUrl } from '../src/internals.ts';
import { createScratchSchema } from '../test/support/pg-schemas.ts';

const args = await yargs(hideBin(process.argv))
  .option('db', { type: 'string', describe: 'sqlite:PATH or postgres://… (default: a fresh SQLite file)' })
  .option('tis', { type: 'number', default: 2000, describe: 'sensor task instances' })
  .option('targets', { type: 'number', default: 50, describe: 'distinct target files' })
  .option('spread', { type: 'number', default: 60, describe: 'seconds over which the targets appear' })
  .option('poke-interval', { type: 'number', default: 5, describe: 'seconds' })
  .option('poke-tis', { type: 'number', default: 80, describe: 'task instances run in poke mode (scaled to --tis)' })
  .option('modes', { type: 'string', default: 'poke,reschedule,deferrable,smart' })
  .strict()
  .parse();

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SLOTS = 8;

const SENSOR_MODULE = `import { appendFileSync, existsSync } from 'node:fs';
import { BaseSensorOperator } from ${JSON.stringify(path.join(root, 'src/index.ts'))};
export class TargetSensor extends BaseSensorOperator {
  static classpath = 'bench.TargetSensor';
  static pokeContextFields = ['target'];
  constructor({ target, ...options }) { super(options); this.target = target; }
  poke() {
    appendFileSync(process.env.BENCH_POKES, this.taskId === '__consolidated_poke__' ? 't\\n' : 'w\\n');
    return existsSync(this.target);
  }
}
`;

for (const mode of args.modes.split(',')) console.log(JSON.stringify(await runMode(mode)));

async function runMode(mode: string) {
  const scratch = mkdtempSync(path.join(os.tmpdir(), `deferflow-sensor-bench-${mode}-`));
  const { url, dispose } = await prepareDatabase(args.db, scratch);
  const tis = mode === 'poke' ? Math.min(args['poke-tis'], args.tis) : args.tis;
  const targets = Array.from({ length: args.targets }, (_, i) => path.join(scratch, 'targets', `t${i}.ready`));
  mkdirSync(path.join(scratch, 'targets'));
  mkdirSync(path.join(scratch, 'dags'));
  writeFileSync(path.join(scratch, 'sensors.mjs'), SENSOR_MODULE);
  const dagMode = mode === 'smart' ? 'poke' : mode;
  // Task i waits on target i % targets: every target is shared by tis / targets sensors.
  writeFileSync(
    path.join(scratch, 'dags', 'bench.mjs'),
    `import { Dag } from ${JSON.stringify(path.join(root, 'src/index.ts'))};\nimport { TargetSensor } from '../sensors.mjs';\n` +
      `const targets = ${JSON.stringify(targets)};\n` +
      `export const dag = new Dag({ dagId: 'sensor_bench' }).add(...Array.from({ length: ${tis} }, (_, i) => ` +
      `new TargetSensor({ taskId: 's' + i, target: targets[i % targets.length], mode: ${JSON.stringify(dagMode)}, pokeInterval: ${args['poke-interval']}, timeout: 3600 })));\n`,
  );
  const pokesFile = path.join(scratch, 'pokes.txt');
  writeFileSync(pokesFile, '');
  process.env.BENCH_POKES = pokesFile;
  const app = await deferflow({
    databaseUrl: url,
    dagsFolder: path.join(scratch, 'dags'),
    worker: { concurrency: SLOTS, pollInterval: 0.2, shutdownGrace: 0, smartSensors: mode === 'smart' ? ['TargetSensor'] : [] },
    scheduler: { pollInterval: 0.2, runsPerPass: 10 },
    triggerer: { pollInterval: 0.2, capacity: 5000, triggerModules: [path.join(scratch, 'sensors.mjs')] },
    logger: pino({ level: 'warn' }, pino.destination(2)),
  });
  try {
    const runId = await app.triggerDagRun('sensor_bench');
    const started = Date.now();
    // Targets appear one after another over the spread, from 2 s on.
    const appearAt = targets.map((_, i) => started + 2_000 + Math.round((i * args.spread * 1000) / targets.length));
    const appeared = new Map<number, number>();
    let peakRunning = 0;
    let triggerRowsPeak = 0;
    const sampler = setInterval(() => {
      peakRunning = Math.max(peakRunning, app.worker!.runningCount);
      const now = Date.now();
      appearAt.forEach((at, i) => {
        if (!appeared.has(i) && now >= at) {
          writeFileSync(targets[i]!, 'ready');
          appeared.set(i, Date.now());
        }
      });
    }, 50);
    const rowSampler = setInterval(() => {
      void app.database.db
        .selectFrom('trigger')
        .select((eb) => eb.fn.countAll<number>().as('n'))
        .executeTakeFirst()
        .then(
          (row) => (triggerRowsPeak = Math.max(triggerRowsPeak, Number(row?.n ?? 0))),
          () => {},
        );
    }, 250);
    const state = await app.waitForDagRun('sensor_bench', runId);
    clearInterval(sampler);
    clearInterval(rowSampler);
    if (state !== 'success') throw new Error(`the ${mode} run ${state}`);
    const wallMs = Date.now() - started;
    const rows = await app.database.db.selectFrom('task_instance').select(['task_id', 'end_date']).where('run_id', '=', runId).execute();
    const lags = rows.map((ti) => fromDbTime(ti.end_date!) - appeared.get(Number(ti.task_id.slice(1)) % targets.length)!).sort((a, b) => a - b);
    const pokes = readFileSync(pokesFile, 'utf8').split('\n').filter(Boolean);
    const scale = args.tis / tis;
    const slotSeconds = app.worker!.slotMsSpent / 1000;
    return {
      mode,
      dialect: parseDatabaseUrl(url).dialect,
      tis: args.tis,
      ...(scale === 1 ? {} : { measured_tis: tis, scaled: `slot_seconds and pokes measured on ${tis} TIs, x${scale}` }),
      distinct_targets: args.targets,
      poke_interval_s: args['poke-interval'],
      slot_seconds: Number((slotSeconds * scale).toFixed(1)),
      peak_running: peakRunning,
      pokes: Math.round(pokes.length * scale),
      pokes_on_worker: Math.round(pokes.filter((p) => p === 'w').length * scale),
      pokes_on_triggerer: pokes.filter((p) => p === 't').length,
      trigger_rows_peak: triggerRowsPeak,
      done_after_target_p50_ms: lags[Math.floor(lags.length * 0.5)],
      done_after_target_p99_ms: lags[Math.min(lags.length - 1, Math.floor(lags.length * 0.99))],
      wall_ms: wallMs,
    };
  } finally {
    await app.stop();
    await dispose();
    rmSync(scratch, { recursive: true, force: true });
  }
}

async function prepareDatabase(target: string | undefined, scratch: string): Promise<{ url: string; dispose: () => Promise<void> }> {
  if (target === undefined || target === 'sqlite') return { url: `sqlite:${path.join(scratch, 'bench.db')}`, dispose: async () => {} };
  if (target.startsWith('sqlite:')) return { url: target, dispose: async () => {} };
  const schema = await createScratchSchema(target, 'sensorbench');
  return { url: schema.url, dispose: () => schema.drop() };
}
