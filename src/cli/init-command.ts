import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Argv } from 'yargs';
import { InvalidOptionError } from '../vocabulary/errors.ts';
import { installationSource, ownPackage } from './own-package.ts';

/** `deferflow init [DIR]`: a project a user can start from, next to nothing deferflow needs to know. */
export function registerInitCommand(cli: Argv, version: string): void {
  cli.command(
    'init [dir]',
    'Create a deferflow project: package.json, tsconfig.json, a DAG that defers, a custom trigger, a README (refuses a folder that is not empty)',
    (command) =>
      command.positional('dir', { type: 'string', default: '.', describe: 'Where to create it (made if missing; must be empty)' }).option('deferflow', {
        type: 'string',
        describe: `The deferflow dependency to install: a version range, a tarball path or a git URL [default: where the running deferflow came from; ^${version} from the registry]`,
      }),
    // async: a refusal then reaches the CLI's error handler (exit 2) like every other command's.
    async (args) => {
      const dir = path.resolve(String(args.dir));
      if (existsSync(dir) && readdirSync(dir).length > 0) {
        throw new InvalidOptionError('dir', `${dir} is not empty; init writes only into a new or empty folder and never overwrites a file`);
      }
      const name =
        path
          .basename(dir)
          .toLowerCase()
          .replace(/[^a-z0-9-_.]/g, '-')
          .replace(/^[._-]+/, '') || 'deferflow-project';
      const { spec, why } =
        typeof args.deferflow === 'string' && args.deferflow !== ''
          ? { spec: dependencySpec(args.deferflow), why: 'given by --deferflow' }
          : defaultSpec(version);
      for (const [file, text] of Object.entries(projectFiles(name, spec, version))) {
        mkdirSync(path.dirname(path.join(dir, file)), { recursive: true });
        writeFileSync(path.join(dir, file), text, { flag: 'wx' });
      }
      process.stdout.write(
        `created a deferflow project in ${dir}\n` +
          `its deferflow dependency: ${spec} (${why})\n\n` +
          `  cd ${relativeOrAbsolute(dir)}\n` +
          '  npm install\n' +
          '  npm start        # runs dags/example.ts once, in one process, on ./deferflow.db\n',
      );
    },
  );
}

/**
 * The dependency init writes without --deferflow: the source the running deferflow was installed
 * from, so that a project made before deferflow is on the registry (from a checkout, or with
 * `npx --package <tarball>`) installs; a version range only for an installation from the registry.
 */
function defaultSpec(version: string): { spec: string; why: string } {
  const source = installationSource();
  switch (source.kind) {
    case 'registry':
      return { spec: `^${version}`, why: 'the registry, where this deferflow was installed from; --deferflow sets another' };
    case 'folder':
      return { spec: source.spec, why: 'the folder this deferflow runs from; --deferflow sets another' };
    case 'installed':
      return { spec: source.spec, why: 'where this deferflow was installed from; --deferflow sets another' };
    case 'unknown':
      return {
        spec: `^${version}`,
        why: 'from the registry: where this deferflow came from could not be told; --deferflow sets a tarball, a folder or a git URL instead',
      };
  }
}

function relativeOrAbsolute(dir: string): string {
  const relative = path.relative(process.cwd(), dir);
  return relative === '' ? '.' : relative.startsWith('..') ? dir : relative;
}

/**
 * The dependency as the project's package.json must say it. npm resolves a path there from the
 * project's folder, not from where init ran, so a tarball or folder given by path is written as
 * an absolute `file:` spec.
 */
function dependencySpec(given: string): string {
  if (/^file:/.test(given)) return `file:${path.resolve(given.slice('file:'.length))}`;
  const isPath = /^(\.{1,2}[/\\]|[/\\]|~[/\\])/.test(given) || (/\.(tgz|tar\.gz)$/.test(given) && !/^[a-z][\w+.-]*:/i.test(given));
  return isPath ? `file:${path.resolve(given.replace(/^~(?=[/\\])/, os.homedir()))}` : given;
}

/**
 * A version range or dist-tag comes from the registry, built. From anywhere else (a tarball, a
 * folder, a git URL) npm counts deferflow's own `prepare` (which builds a git checkout) among
 * the scripts allowScripts must allow, under that source as its key, and warns if it is missing.
 */
function fromRegistry(spec: string): boolean {
  return !/[/\\:]|\.tgz$|\.tar\.gz$/.test(spec);
}

function projectFiles(name: string, deferflowSpec: string, version: string): Record<string, string> {
  // The versions deferflow itself is built and tested with.
  const devDependency = (dependency: string, fallback: string) => ownPackage().devDependencies?.[dependency] ?? fallback;
  const triggerModule = './triggers/countdown.ts';
  const manifest = {
    name,
    version: '0.1.0',
    private: true,
    type: 'module',
    scripts: {
      start: `deferflow standalone --dags ./dags --trigger-module ${triggerModule} --trigger-dag example --exit-when-done`,
      standalone: `deferflow standalone --dags ./dags --trigger-module ${triggerModule}`,
      worker: 'deferflow worker --dags ./dags',
      scheduler: 'deferflow scheduler',
      triggerer: `triggerer --trigger-module ${triggerModule}`,
      'db:migrate': 'deferflow db migrate',
      typecheck: 'tsc --noEmit',
    },
    dependencies: { deferflow: deferflowSpec },
    devDependencies: { '@types/node': devDependency('@types/node', '^20.19.0'), typescript: devDependency('typescript', '^5.9.0') },
    // npm runs a dependency's install script only when listed here: better-sqlite3 builds its addon.
    allowScripts: { 'better-sqlite3': true, esbuild: true, ...(fromRegistry(deferflowSpec) ? {} : { [deferflowSpec]: true }) },
  };
  return {
    'package.json': `${JSON.stringify(manifest, null, 2)}\n`,
    'tsconfig.json': `${JSON.stringify(
      {
        compilerOptions: {
          target: 'ES2022',
          module: 'nodenext',
          moduleResolution: 'nodenext',
          strict: true,
          noEmit: true,
          allowImportingTsExtensions: true,
          types: ['node'],
        },
        include: ['dags', 'triggers'],
      },
      null,
      2,
    )}\n`,
    '.gitignore': 'node_modules/\n*.db\n*.db-wal\n*.db-shm\n',
    [triggerModule.slice(2)]: COUNTDOWN_TRIGGER,
    'dags/example.ts': EXAMPLE_DAG,
    'README.md': readme(name, version),
  };
}

const COUNTDOWN_TRIGGER = `import { BaseTrigger, InvalidTriggerArgumentError, TriggerEvent, type SerializedTrigger } from 'deferflow';

/**
 * A custom trigger: counts down \`from\` in steps of \`stepSeconds\` on the triggerer, then fires
 * with how many steps it took. The triggerer runs it because --trigger-module names this file.
 */
export class CountdownTrigger extends BaseTrigger {
  static readonly classpath = 'example.CountdownTrigger';

  constructor(readonly kwargs: { from: number; stepSeconds: number }) {
    super();
    if (!Number.isInteger(kwargs.from) || kwargs.from < 0) {
      // A refused kwarg fails only the task instances waiting on this trigger, naming the reason.
      throw new InvalidTriggerArgumentError('CountdownTrigger', \`from must be a whole number of steps, got \${kwargs.from}\`);
    }
  }

  serialize(): SerializedTrigger {
    return { classpath: CountdownTrigger.classpath, kwargs: this.kwargs };
  }

  async *run(): AsyncGenerator<TriggerEvent<{ steps: number }>> {
    let steps = 0;
    for (let left = this.kwargs.from; left > 0; left--, steps++) await this.sleep(this.kwargs.stepSeconds * 1000);
    yield new TriggerEvent({ steps });
  }
}
`;

const EXAMPLE_DAG = `import { BaseOperator, Dag, FunctionOperator, type RuntimeContext } from 'deferflow';
import { CountdownTrigger } from '../triggers/countdown.ts';

/** Waits for the countdown on the triggerer: its worker slot is free meanwhile. */
class WaitForCountdown extends BaseOperator<RuntimeContext> {
  execute(context: RuntimeContext): never {
    context.log.info('deferring to the triggerer');
    return this.defer({ trigger: new CountdownTrigger({ from: 3, stepSeconds: 0.5 }), method: 'counted' });
  }

  counted(context: RuntimeContext, event: { steps: number }): { steps: number } {
    context.log.info({ steps: event.steps }, 'the countdown fired');
    return event;
  }
}

export const example = new Dag({ dagId: 'example', description: 'defers to a custom trigger, then reports' });
const wait = new WaitForCountdown({ taskId: 'wait' });
const report = new FunctionOperator({ taskId: 'report', fn: async (context) => ({ counted: await context.xcomPull('wait') }) });
example.add(wait, report);
wait.before(report);
`;

function readme(name: string, version: string): string {
  return `# ${name}

A deferflow ${version} project: DAGs in \`dags/\`, custom triggers in \`triggers/\`, both
TypeScript, loaded without a build step. deferflow's own README is installed with it:
[node_modules/deferflow/README.md](node_modules/deferflow/README.md).

\`\`\`sh
npm install
npm start              # runs dags/example.ts once (scheduler, worker, triggerer in one process)
npx deferflow tasks logs --run <run id> --task wait
\`\`\`

The database is \`./deferflow.db\` (SQLite) unless \`DEFERFLOW_DATABASE_URL\` names another, e.g.
\`postgres://user@host:5432/db\`. For production run the daemons apart, several of each if you
like: \`npm run db:migrate\`, then \`npm run scheduler\`, \`npm run worker\`, \`npm run triggerer\`.
\`npm run typecheck\` type-checks your DAGs and triggers.
`;
}
