/**
 * deferflow as a user gets it: the packed tarball installed into a fresh project outside this
 * repository, then (a) imported from a plain .mjs file by node, (b) type-checked from a consumer
 * .ts file under module/moduleResolution nodenext with skipLibCheck off, (c) run with
 * `npx deferflow standalone` on a DAG and a custom trigger that live in that project, (d) scaffold
 * a project with `deferflow init` and `npm start` it. publint and arethetypeswrong check the
 * package itself.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { openDatabase } from '../../src/database/connect.ts';
import { REPO_ROOT } from '../support/processes.ts';

const run = promisify(execFile);
const scratch = mkdtempSync(path.join(os.tmpdir(), 'deferflow-package-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** Runs a command to its end; resolves to its exit code and output whatever the code. */
async function exec(command: string, args: readonly string[], cwd: string, timeoutMs = 240_000, env: Record<string, string> = {}) {
  try {
    const { stdout, stderr } = await run(command, [...args], {
      cwd,
      timeout: timeoutMs,
      maxBuffer: 64 * 1024 * 1024,
      env: { ...process.env, NO_COLOR: '1', ...env },
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code?: number | string; stdout?: string; stderr?: string };
    return { code: typeof failed.code === 'number' ? failed.code : -1, stdout: failed.stdout ?? '', stderr: failed.stderr ?? String(error) };
  }
}

const TRIGGER = `import { BaseTrigger, TriggerEvent, type SerializedTrigger } from 'deferflow';

/** Counts down \`from\` in steps of \`stepMs\`, then fires with how many steps it took. */
export class CountdownTrigger extends BaseTrigger {
  static readonly classpath = 'proj.CountdownTrigger';
  constructor(readonly kwargs: { from: number; stepMs: number }) {
    super();
  }
  serialize(): SerializedTrigger {
    return { classpath: CountdownTrigger.classpath, kwargs: this.kwargs };
  }
  async *run(): AsyncGenerator<TriggerEvent<{ steps: number }>> {
    let steps = 0;
    for (let left = this.kwargs.from; left > 0; left--, steps++) await this.sleep(this.kwargs.stepMs);
    yield new TriggerEvent({ steps });
  }
}
`;

// The README's embedding example, as a project's service runs it.
const EMBED = `import { deferflow, readTaskInstance } from 'deferflow';
const app = await deferflow({
  databaseUrl: 'sqlite:./embedded.db',
  dagsFolder: './dags',
  worker: { concurrency: 2, pollInterval: 0.2 },
  scheduler: { pollInterval: 0.2 },
  triggerer: { triggerModules: ['./triggers/countdown.ts'], pollInterval: 0.2 },
  logLevel: 'warn',
});
const runId = await app.triggerDagRun('countdown');
const state = await app.waitForDagRun('countdown', runId);
const { id } = await app.database.db.selectFrom('task_instance').select('id').where('run_id', '=', runId).executeTakeFirstOrThrow();
console.log(state, JSON.stringify((await readTaskInstance(app.database, id)).returnValue));
await app.stop();
`;

// What a consumer's type checker sees of the embedding API and the exported row types.
const EMBED_TYPED = `import { Duration } from 'luxon';
import { deferflow, type DeferflowConfig, type TaskInstance } from 'deferflow';
import type { TaskInstanceRow } from 'deferflow/internals';
import { CountdownTrigger } from '../triggers/countdown.ts';

const config: DeferflowConfig = {
  worker: { concurrency: 4, shutdownGrace: Duration.fromObject({ seconds: 20 }) },
  scheduler: false,
  triggerer: { capacity: 5000, triggerClasses: [CountdownTrigger] },
};
export async function start(): Promise<string | null> {
  const app = await deferflow(config);
  const row: TaskInstanceRow | undefined = await app.database.db.selectFrom('task_instance').selectAll().executeTakeFirst();
  const state: TaskInstance['state'] = row?.state ?? null;
  await app.stop();
  return state;
}
`;

const DAG = `import { BaseOperator, Dag, type RuntimeContext } from 'deferflow';
import { TimeDeltaTrigger } from 'deferflow/triggers';
import { CountdownTrigger } from '../triggers/countdown.ts';

class Countdown extends BaseOperator<RuntimeContext> {
  execute(): never {
    return this.defer({ trigger: new CountdownTrigger({ from: 3, stepMs: 100 }), method: 'counted' });
  }
  counted(_context: RuntimeContext, event: { steps: number }): never {
    return this.defer({ trigger: new TimeDeltaTrigger({ delta: 0.2 }), method: 'done', kwargs: { steps: event.steps } });
  }
  done(_context: RuntimeContext, _event: unknown, kwargs: { steps: number }): { steps: number } {
    return { steps: kwargs.steps };
  }
}

export const dag = new Dag({ dagId: 'countdown' }).add(new Countdown({ taskId: 'count' }));
`;

/**
 * Where a user's install finds better-sqlite3's native module. Online, its install script
 * downloads a prebuilt one for the platform in a second or two; this machine has no internet, so
 * it would compile SQLite from source instead (~85 s of CPU, most of this test's time, slowing
 * every test running beside it). The binary this repository's own install made is offered as that
 * download, through prebuild-install's documented local-prebuilds setting: the same file, for the
 * same version, Node ABI and platform. Should the project resolve another version, the name does
 * not match and the install builds it as before.
 */
async function betterSqlitePrebuild(): Promise<Record<string, string>> {
  const module = path.join(REPO_ROOT, 'node_modules/better-sqlite3');
  const { version } = JSON.parse(readFileSync(path.join(module, 'package.json'), 'utf8')) as { version: string };
  const folder = path.join(scratch, 'prebuilds');
  mkdirSync(folder, { recursive: true });
  const name = `better-sqlite3-v${version}-node-v${process.versions.modules}-${process.platform}-${process.arch}.tar.gz`;
  const packed = await exec('tar', ['-czf', path.join(folder, name), 'build/Release/better_sqlite3.node'], module);
  expect(packed.code, packed.stderr).toBe(0);
  return { npm_config_better_sqlite3_local_prebuilds: folder };
}

/**
 * The TypeScript modules of the README and docs/: every ```ts block (a ```ts fragment is a piece of code shown
 * in passing, not a module), with the extension its first-line comment names (`// dags/etl.mts`).
 */
function readmeTypeScript(): { code: string; extension: string }[] {
  const pages = ['README.md', ...readdirSync(path.join(REPO_ROOT, 'docs')).map((file) => path.join('docs', file))].filter((file) => file.endsWith('.md'));
  const readme = pages.map((file) => readFileSync(path.join(REPO_ROOT, file), 'utf8')).join('\n');
  return [...readme.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map(([, code]) => ({
    code: code!,
    extension: /^\/\/ \S+(\.[cm]?ts)\n/.exec(code!)?.[1] ?? '.ts',
  }));
}

/** The README's shell block it says this test runs as written (the comment line above it). */
function readmeRunnableBlock(): string {
  const readme = readFileSync(path.join(REPO_ROOT, 'README.md'), 'utf8');
  const block = /^<!-- test\/process\/package\.test\.ts runs this block as written[^\n]*-->\n```sh\n([\s\S]*?)^```$/m.exec(readme)?.[1];
  if (block === undefined) throw new Error('README.md has no shell block marked to be run by test/process/package.test.ts');
  return block;
}

describe('the packed package in a project of its own', () => {
  it('installs from its tarball, imports with plain node, type-checks as a consumer, and runs a DAG and a trigger of that project', async () => {
    const { version } = JSON.parse(readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string };
    // dist/ is fresh: the test run's global setup built it.
    const packed = await exec('npm', ['pack', '--ignore-scripts', '--pack-destination', scratch], REPO_ROOT);
    expect(packed.code, packed.stderr).toBe(0);
    const tarball = path.join(scratch, `deferflow-${version}.tgz`);

    const publint = await exec(process.execPath, [path.join(REPO_ROOT, 'node_modules/publint/src/cli.js'), '--strict'], REPO_ROOT);
    expect(publint.code, `${publint.stdout}${publint.stderr}`).toBe(0);
    const attw = await exec(
      process.execPath,
      [path.join(REPO_ROOT, 'node_modules/@arethetypeswrong/cli/dist/index.js'), tarball, '--profile', 'esm-only'],
      REPO_ROOT,
    );
    expect(attw.code, `${attw.stdout}${attw.stderr}`).toBe(0);

    const project = path.join(scratch, 'project');
    mkdirSync(path.join(project, 'dags'), { recursive: true });
    mkdirSync(path.join(project, 'triggers'));
    const nodeTypes = (JSON.parse(readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> }).devDependencies[
      '@types/node'
    ]!;
    writeFileSync(
      path.join(project, 'package.json'),
      JSON.stringify({
        name: 'a-users-project',
        private: true,
        type: 'module',
        dependencies: { deferflow: `file:${tarball}` },
        devDependencies: { '@types/node': nodeTypes },
        // What the README tells a user installing from a tarball to allow: deferflow under its source.
        allowScripts: { 'better-sqlite3': true, esbuild: true, [`file:${tarball}`]: true },
      }),
    );
    const installed = await exec('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline'], project, 280_000, await betterSqlitePrebuild());
    expect(installed.code, installed.stderr).toBe(0);
    expect(installed.stderr).not.toContain('not yet covered by allowScripts');

    // (a) plain node, no loader.
    writeFileSync(
      path.join(project, 'app.mjs'),
      `import { BaseTrigger, Dag, deferflow, ERROR_CODES } from 'deferflow';
import { DateTimeTrigger, MqttTrigger, NatsJetStreamTrigger, RabbitMqTrigger, RedisStreamTrigger } from 'deferflow/triggers';
console.log(typeof BaseTrigger, typeof Dag, ERROR_CODES.includes('DF_NOT_JSON'), new DateTimeTrigger({ moment: '2030-01-01T01:00:00+01:00' }).moment);
// A broker's client is an optional peer dependency this project did not install.
process.env.DEFERFLOW_CONN_EVENTS = 'redis://127.0.0.1:1';
process.env.DEFERFLOW_CONN_BUS = 'nats://127.0.0.1:1';
process.env.DEFERFLOW_CONN_PLANT = 'mqtt://127.0.0.1:1';
process.env.DEFERFLOW_CONN_AMQP = 'amqp://127.0.0.1:1';
for (const trigger of [new RedisStreamTrigger({ connection: 'events', stream: 'orders' }), new NatsJetStreamTrigger({ connection: 'bus', stream: 'ORDERS' }), new MqttTrigger({ connection: 'plant', topic: 'orders/#' }), new RabbitMqTrigger({ connection: 'amqp', exchange: 'orders' })]) {
  try {
    await trigger.run(new AbortController().signal).next();
  } catch (error) {
    console.log(error.code, error.message);
  }
}
// So are OpenTelemetry's packages, which tracing needs: refused before anything is opened.
try {
  await deferflow({ databaseUrl: 'sqlite:./never.db', worker: false, scheduler: false, tracing: { exporter: 'otlp' } });
} catch (error) {
  console.log(error.code, error.message, (await import('node:fs')).existsSync('never.db'));
}
`,
    );
    const plain = await exec(process.execPath, ['app.mjs'], project);
    expect(plain.stderr).toBe('');
    const appPrinted = plain.stdout.trim().split('\n');
    // Tracing names at once every package it needs that is missing (@opentelemetry/api may come with another package).
    expect(appPrinted.pop()).toMatch(
      /^DF_MISSING_PACKAGE tracing needs the packages (@opentelemetry\/api, )?@opentelemetry\/sdk-trace-base, @opentelemetry\/resources, @opentelemetry\/exporter-trace-otlp-http, which are not installed: run `npm install [^`]+` in your project false$/,
    );
    expect(appPrinted).toEqual([
      'function function true 2030-01-01T00:00:00.000Z',
      'DF_MISSING_PACKAGE RedisStreamTrigger needs the package @redis/client, which is not installed: run `npm install @redis/client` in your project',
      'DF_MISSING_PACKAGE NatsJetStreamTrigger needs the package @nats-io/transport-node, which is not installed: run `npm install @nats-io/transport-node` in your project',
      'DF_MISSING_PACKAGE MqttTrigger needs the package mqtt, which is not installed: run `npm install mqtt` in your project',
      'DF_MISSING_PACKAGE RabbitMqTrigger needs the package amqplib, which is not installed: run `npm install amqplib` in your project',
    ]);

    // (b) a consumer's type check: strict, nodenext, the package's own .d.ts checked too.
    writeFileSync(path.join(project, 'triggers/countdown.ts'), TRIGGER);
    writeFileSync(path.join(project, 'dags/countdown.ts'), DAG);
    mkdirSync(path.join(project, 'service'));
    writeFileSync(path.join(project, 'service/embed.ts'), EMBED_TYPED);
    // The README's TypeScript, as a user pastes it into this project: each module it shows is
    // checked against the packed declarations below, so an example cannot drift from the API.
    const readmeModules = readmeTypeScript();
    expect(readmeModules.length).toBeGreaterThanOrEqual(6);
    mkdirSync(path.join(project, 'readme'));
    for (const [index, module] of readmeModules.entries()) {
      // Written one folder down, as a DAG file is: the README's paths from the project root move up one.
      const code = module.code.replaceAll("from './", "from '../");
      writeFileSync(path.join(project, 'readme', `example-${index + 1}${module.extension}`), code);
      // Its DAG examples import its triggers from where a project keeps them (the tour's names its file).
      if (code.includes('export class HttpStatusTrigger')) writeFileSync(path.join(project, 'triggers/http-status-trigger.ts'), code);
      const triggerFile = /^\/\/ (triggers\/[\w-]+\.ts)\n/.exec(module.code)?.[1];
      if (triggerFile !== undefined) writeFileSync(path.join(project, triggerFile), module.code);
    }
    writeFileSync(
      path.join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          module: 'nodenext',
          moduleResolution: 'nodenext',
          strict: true,
          skipLibCheck: false,
          noEmit: true,
          allowImportingTsExtensions: true,
          types: ['node'],
        },
        include: ['dags', 'triggers', 'service', 'readme'],
      }),
    );
    const typecheck = await exec(process.execPath, [path.join(REPO_ROOT, 'node_modules/typescript/bin/tsc'), '-p', project], project);
    expect(`${typecheck.stdout}${typecheck.stderr}`).toBe('');
    expect(typecheck.code).toBe(0);

    // (c) the project's own DAG and trigger, run by the installed CLI.
    const versionOut = await exec('npx', ['deferflow', '--version'], project);
    expect(versionOut.stdout.trim()).toBe(version);
    const standalone = await exec(
      'npx',
      [
        'deferflow',
        'standalone',
        '--dags',
        './dags',
        '--trigger-module',
        './triggers/countdown.ts',
        '--trigger-dag',
        'countdown',
        '--exit-when-done',
        '--db',
        'sqlite:./project.db',
      ],
      project,
      60_000,
    );
    expect(standalone.code, `${standalone.stdout}\n${standalone.stderr}`).toBe(0);
    expect(standalone.stdout).toMatch(/countdown manual__\S+: success in /);
    const database = openDatabase(`sqlite:${path.join(project, 'project.db')}`);
    try {
      const ti = await database.db.selectFrom('task_instance').select(['state', 'return_value']).where('task_id', '=', 'count').executeTakeFirstOrThrow();
      expect(ti.state).toBe('success');
      expect(JSON.parse(ti.return_value!)).toEqual({ steps: 3 });
    } finally {
      await database.close();
    }

    // (c') the same DAG and trigger run by deferflow embedded in the project's own service, with
    // plain node (no loader: deferflow registers tsx for the project's TypeScript itself). The
    // process exits on its own once stopped: nothing is left open.
    writeFileSync(path.join(project, 'embed.mjs'), EMBED);
    const embedded = await exec(process.execPath, ['embed.mjs'], project, 60_000);
    expect(embedded.code, `${embedded.stdout}\n${embedded.stderr}`).toBe(0);
    // deferflow's own log lines (JSON, warnings up at this level: a busy machine may log a slow
    // turn of the loop) share the service's stdout; what the service printed is the rest.
    const printed = embedded.stdout
      .trim()
      .split('\n')
      .filter((line) => !line.startsWith('{"level":'));
    expect(printed).toEqual(['success {"steps":3}']);

    // (c'') the README's manual install, as written, in a folder of its own; only the package
    // comes from the tarball, as the README's comment on that line says.
    const manual = path.join(scratch, 'manual-install');
    mkdirSync(manual);
    const block = readmeRunnableBlock();
    expect(block).toMatch(/^npm install deferflow /m);
    const script = block.replace(/^npm install deferflow .*$/m, `npm install --no-audit --no-fund --prefer-offline ${JSON.stringify(tarball)}`);
    const manualRun = await exec('bash', ['-euo', 'pipefail', '-c', script], manual, 280_000, await betterSqlitePrebuild());
    expect(manualRun.code, `${manualRun.stdout}\n${manualRun.stderr}`).toBe(0);
    expect(manualRun.stdout).toMatch(/hello manual__\S+: success in /);

    // (d) deferflow init: a project a user starts from. Its dependencies are the ones just
    // installed (the same tarball): linked, not installed a second time.
    // Given by a path relative to where init runs; npm would read it from the project's folder.
    const scaffolded = await exec('npx', ['deferflow', 'init', 'app', '--deferflow', path.relative(project, tarball)], project);
    expect(scaffolded.code, scaffolded.stderr).toBe(0);
    expect(scaffolded.stdout).toContain('npm start');
    const app = path.join(project, 'app');
    const manifest = readFileSync(path.join(app, 'package.json'), 'utf8');
    // Not from the registry: npm counts deferflow's `prepare` among the scripts allowScripts covers.
    expect(JSON.parse(manifest)).toMatchObject({
      type: 'module',
      dependencies: { deferflow: `file:${tarball}` },
      allowScripts: { 'better-sqlite3': true, esbuild: true, [`file:${tarball}`]: true },
    });
    // Without --deferflow: the source this installation came from (the tarball), said on stdout.
    const byDefault = await exec('npx', ['deferflow', 'init', 'default-app'], project);
    expect(byDefault.code, byDefault.stderr).toBe(0);
    expect(byDefault.stdout).toContain(`its deferflow dependency: file:${tarball} (where this deferflow was installed from; --deferflow sets another)`);
    expect(JSON.parse(readFileSync(path.join(project, 'default-app', 'package.json'), 'utf8'))).toMatchObject({
      dependencies: { deferflow: `file:${tarball}` },
      allowScripts: { [`file:${tarball}`]: true },
    });
    // Installed from the registry (as npm's lockfile would say): a version range of it.
    const hiddenLock = path.join(project, 'node_modules', '.package-lock.json');
    const lockText = readFileSync(hiddenLock, 'utf8');
    const lock = JSON.parse(lockText) as { packages: Record<string, { resolved?: string }> };
    lock.packages['node_modules/deferflow']!.resolved = `https://registry.npmjs.org/deferflow/-/deferflow-${version}.tgz`;
    writeFileSync(hiddenLock, JSON.stringify(lock));
    const fromRegistry = await exec('npx', ['deferflow', 'init', 'registry-app'], project);
    writeFileSync(hiddenLock, lockText);
    expect(fromRegistry.code, fromRegistry.stderr).toBe(0);
    expect(fromRegistry.stdout).toContain(`its deferflow dependency: ^${version} (the registry`);
    const registryManifest = JSON.parse(readFileSync(path.join(project, 'registry-app', 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
      allowScripts: Record<string, boolean>;
    };
    expect(registryManifest.dependencies.deferflow).toBe(`^${version}`);
    expect(registryManifest.allowScripts).toEqual({ 'better-sqlite3': true, esbuild: true });
    // The README's command from a folder with no deferflow installed: from the tarball, and from a checkout.
    const elsewhere = path.join(scratch, 'elsewhere');
    mkdirSync(elsewhere);
    // Offline first, as the installs above: npx would otherwise ask the registry about every dependency (~8 s here).
    const viaNpx = await exec(
      'npx',
      ['--yes', '--prefer-offline', '--package', tarball, 'deferflow', 'init', 'from-tarball'],
      elsewhere,
      240_000,
      await betterSqlitePrebuild(),
    );
    expect(viaNpx.code, viaNpx.stderr).toBe(0);
    expect(viaNpx.stdout).toContain(`its deferflow dependency: file:${tarball}`);
    expect(JSON.parse(readFileSync(path.join(elsewhere, 'from-tarball', 'package.json'), 'utf8')).dependencies.deferflow).toBe(`file:${tarball}`);
    const viaCheckout = await exec(process.execPath, [path.join(REPO_ROOT, 'bin/deferflow.js'), 'init', 'from-checkout'], elsewhere);
    expect(viaCheckout.code, viaCheckout.stderr).toBe(0);
    expect(viaCheckout.stdout).toContain(`its deferflow dependency: file:${realpathSync(REPO_ROOT)} (the folder this deferflow runs from`);
    // The made project's README links only to what exists once it is installed.
    const appReadme = readFileSync(path.join(elsewhere, 'from-checkout', 'README.md'), 'utf8');
    expect([...appReadme.matchAll(/\]\(([^)]+)\)/g)].map(([, target]) => target)).toEqual(['node_modules/deferflow/README.md']);
    expect(readFileSync(path.join(project, 'node_modules/deferflow/README.md'), 'utf8')).toContain('# deferflow');
    const again = await exec('npx', ['deferflow', 'init', 'app'], project);
    expect(again.code).toBe(2);
    expect(again.stderr).toContain('is not empty; init writes only into a new or empty folder and never overwrites a file');
    expect(readFileSync(path.join(app, 'package.json'), 'utf8')).toBe(manifest);
    symlinkSync(path.join(project, 'node_modules'), path.join(app, 'node_modules'), 'dir');
    // The package's declarations were checked above with skipLibCheck off; here the made project's own code is (19 s of CPU less).
    const appTypecheck = await exec(process.execPath, [path.join(REPO_ROOT, 'node_modules/typescript/bin/tsc'), '-p', app, '--skipLibCheck'], app);
    expect(`${appTypecheck.stdout}${appTypecheck.stderr}`).toBe('');
    const started = await exec('npm', ['start'], app, 60_000);
    expect(started.code, `${started.stdout}\n${started.stderr}`).toBe(0);
    expect(started.stdout).toMatch(/example manual__\S+: success in /);
  }, 480_000);
});
