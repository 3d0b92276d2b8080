// The triggerer as users run it: the real binary (bin/triggerer.js) in a child process, judged by
// its exit code, its output and what it leaves in the database.
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { TaskDeferred } from '../../src/index.ts';
import { TRIGGERER_OPTIONS } from '../../src/internals.ts';
import { flagOf } from '../../src/vocabulary/options/option-table.ts';
import { openStores } from '../../src/storage/index.ts';
import { EchoTrigger } from '../fixtures/custom-trigger-module.ts';
import { dropTestDatabases, testDialects, type TestDialect } from '../support/databases.ts';
import { createTaskInstance, migratedDatabase, taskInstance, waitFor, type TestDatabase } from '../support/fixtures.ts';
import { killLeftovers, REPO_ROOT, spawnDeferflow, spawnTriggerer, type TriggererProcess, stopCleanly } from '../support/processes.ts';

/** A database the triggerer cannot open: if refused input were accepted, the process still ends. */
const UNOPENABLE_DB = `sqlite:${path.join(os.tmpdir(), 'deferflow-cli-test-no-such-dir', 'never.db')}`;

const open: TestDatabase[] = [];
afterEach(async () => {
  await killLeftovers();
  await Promise.all(open.splice(0).map((database) => database.close()));
});
afterAll(dropTestDatabases);

async function migrated(dialect: TestDialect = 'sqlite'): Promise<TestDatabase> {
  const database = await migratedDatabase(dialect);
  open.push(database);
  return database;
}

/** The first stdout line (JSON or not) matching `predicate`. */
async function textLine(tr: TriggererProcess, predicate: (line: string) => boolean): Promise<string> {
  return waitFor(
    () => {
      const line = tr.text.find(predicate);
      if (line === undefined && tr.exited) throw new Error(`triggerer exited (${JSON.stringify(tr.exited)}) without the awaited line\n${tr.describe()}`);
      return line;
    },
    { what: `a stdout line from triggerer ${tr.pid}` },
  );
}

const isStartLine = (line: Record<string, unknown>) => typeof line.job_id === 'number' && typeof line.config === 'object';

describe('--version and --help', () => {
  it('--version prints the package version and exits 0, for deferflow and triggerer', async () => {
    const { version } = JSON.parse(readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string };
    for (const proc of [spawnDeferflow(['--version']), spawnTriggerer(['--version'])]) {
      expect(await proc.exitWithin()).toEqual({ code: 0, signal: null });
      expect(proc.text).toEqual([version]);
    }
  });

  it('shows an empty default as none, and every DAG file kind that loads', async () => {
    const standalone = spawnDeferflow(['standalone', '--help']);
    expect(await standalone.exitWithin()).toEqual({ code: 0, signal: null });
    const help = standalone.text.join('\n').replace(/\s+/g, ' ');
    expect(help).toContain('env DEFERFLOW_STANDALONE_TRIGGER_DAG; default none]');
    expect(help).not.toContain('default ]');
    expect(help).toContain('Folder of DAG files (.ts, .mts, .cts, .js, .mjs, .cjs)');
  });
});

describe('triggerer --help', () => {
  it('exits 0 and names every option with its environment variable and default', async () => {
    const tr = spawnTriggerer(['--help']);
    expect(await tr.exitWithin()).toEqual({ code: 0, signal: null });
    expect(tr.stderr).toEqual([]);

    // yargs wraps descriptions across lines; compare with whitespace collapsed.
    const help = tr.text.join('\n').replace(/\s+/g, ' ');
    const names = Object.entries(TRIGGERER_OPTIONS).map(([field, spec]) => flagOf(field, spec));
    const starts = names.map((name) => {
      const at = help.indexOf(`--${name} `);
      expect(at, `--help names --${name}`).toBeGreaterThanOrEqual(0);
      return at;
    });
    for (const [i, spec] of Object.values(TRIGGERER_OPTIONS).entries()) {
      const name = names[i]!;
      const end = Math.min(...starts.filter((start) => start > starts[i]!), help.length);
      const entry = help.slice(starts[i], end);
      const shownDefault = Array.isArray(spec.default) ? 'none' : String(spec.default);
      expect(entry, `--help entry of --${name}`).toContain(spec.env);
      expect(entry, `--help entry of --${name}`).toContain(`default ${shownDefault}`);
      // A number is shown as what it is, with its unit, never as yargs' [string].
      if (typeof spec.default === 'number') {
        expect(entry, `--help entry of --${name}`).toContain(
          spec.unit === 'seconds' || spec.unit === 'milliseconds' ? `[duration, ${spec.unit};` : `[integer, ${spec.unit};`,
        );
        expect(entry, `--help entry of --${name}`).not.toContain('[string]');
      }
    }
    expect(help).toContain('--capacity Most triggers this triggerer runs at once; it claims no more [integer, triggers;');
    expect(help).toContain('--heartbeat-interval How often the triggerer records that it is alive [duration, seconds;');
  });

  it("shows a command's own number flags as numbers, and still refuses one that is not", async () => {
    const help = spawnDeferflow(['dags', 'runs', '--help']);
    expect(await help.exitWithin()).toEqual({ code: 0, signal: null });
    expect(help.text.join('\n').replace(/\s+/g, ' ')).toMatch(/--limit Most runs listed \[integer\] \[default: 25\]/);
    const refused = spawnDeferflow(['dags', 'runs', '--limit', '2.0', '--db', UNOPENABLE_DB]);
    expect(await refused.exitWithin()).toEqual({ code: 2, signal: null });
    expect(refused.stderr.join('\n')).toBe('error [DF_INVALID_OPTION]: limit: expected a positive integer, got "2.0"');
  });
});

describe('triggerer option validation', () => {
  it('refuses a capacity that is not a positive integer, from a flag or the environment, saying what was given', async () => {
    // Each says what was given, as it was given (not "got null" for what yargs made NaN), and an
    // integer option takes only an integer spelling (not 2.0, 1e3 or 0x10).
    const cases: { args: string[]; env?: NodeJS.ProcessEnv; given: string }[] = [
      { args: ['--capacity', '0'], given: 'got "0"' },
      { args: ['--capacity', '-3'], given: 'got "-3"' },
      { args: ['--capacity', '1.5'], given: 'got "1.5"' },
      { args: ['--capacity', 'abc'], given: 'got "abc"' },
      { args: ['--capacity', 'NaN'], given: 'got "NaN"' },
      { args: ['--capacity', '2.0'], given: 'got "2.0"' },
      { args: ['--capacity', '1e3'], given: 'got "1e3"' },
      { args: ['--claims-per-loop', '0x10'], given: 'got "0x10"' },
      { args: [], env: { DEFERFLOW_TRIGGERER_CAPACITY: '0' }, given: 'got "0"' },
      { args: [], env: { DEFERFLOW_TRIGGERER_CAPACITY: '2.0' }, given: 'got "2.0"' },
      { args: ['--poll-interval', 'soon'], given: 'expected a positive number, got "soon"' },
    ];
    const runs = cases.map(({ args, env, given }) => ({
      given,
      label: [...Object.entries(env ?? {}).map(([k, v]) => `${k}=${v}`), ...args].join(' '),
      tr: spawnTriggerer([...args, '--db', UNOPENABLE_DB], env),
    }));
    for (const { label, tr, given } of runs) {
      expect(await tr.exitWithin(), `${label}\n${tr.describe()}`).toEqual({ code: 2, signal: null });
      const stderr = tr.stderr.join('\n');
      expect(stderr, label).toContain('DF_INVALID_OPTION');
      expect(stderr, label).toMatch(/\b(capacity|claims-per-loop|poll-interval)\b/);
      expect(stderr, label).toContain(given);
      expect(tr.text, `${label}: nothing on stdout`).toEqual([]);
    }
  });

  it('refuses a health-check threshold not longer than the heartbeat interval', async () => {
    const runs = [
      ['--heartbeat-interval', '5', '--health-check-threshold', '5'],
      ['--health-check-threshold', '3'], // below the default heartbeat interval (5 s)
    ].map((args) => ({ label: args.join(' '), tr: spawnTriggerer([...args, '--db', UNOPENABLE_DB]) }));
    for (const { label, tr } of runs) {
      expect(await tr.exitWithin(), `${label}\n${tr.describe()}`).toEqual({ code: 2, signal: null });
      const stderr = tr.stderr.join('\n');
      expect(stderr, label).toContain('DF_INVALID_OPTION');
      expect(stderr, label).toContain('health-check-threshold');
    }
  });

  it('refuses a mistyped flag or choice, suggesting the one of that command it most resembles', async () => {
    const cases = [
      { proc: spawnTriggerer(['--capacty', '5', '--db', UNOPENABLE_DB]), stderr: ['error: Unknown argument: capacty', 'capacty: did you mean --capacity?'] },
      {
        proc: spawnDeferflow(['worker', '--concurency', '3', '--pol-interval', '1', '--zzz', '--db', UNOPENABLE_DB]),
        // Each flag once and one line for each flag meant, though yargs lists pol-interval camel-cased too; none for zzz.
        stderr: [
          'error: Unknown arguments: concurency, pol-interval, zzz',
          'concurency: did you mean --concurrency?',
          'pol-interval: did you mean --poll-interval?',
        ],
      },
      // A flag of other commands (or one like it) is not suggested as this command's: it is named with the commands that take it.
      {
        proc: spawnDeferflow(['dags', 'list', '--concurency', '3', '--db', UNOPENABLE_DB]),
        stderr: [
          'error: Unknown argument: concurency',
          'concurency: not an option of deferflow dags list; --concurrency is one of deferflow standalone, deferflow worker',
        ],
      },
      {
        proc: spawnDeferflow(['dags', 'list', '--dags', 'dags', '--db', UNOPENABLE_DB]),
        stderr: [
          'error: Unknown argument: dags',
          'dags: not an option of deferflow dags list; --dags is one of deferflow dags reserialize, deferflow standalone, deferflow worker',
        ],
      },
      {
        proc: spawnTriggerer(['--dag', 'x', '--xyzzy', '--db', UNOPENABLE_DB]),
        stderr: [
          'error: Unknown arguments: dag, xyzzy',
          'dag: not an option of deferflow triggerer; --dag is one of 8 others (deferflow tasks clear, deferflow tasks input, deferflow tasks list, …)',
        ],
      },
      // A flag given without its prefix.
      { proc: spawnDeferflow(['web', '--port', '9000', '--db', UNOPENABLE_DB]), stderr: ['error: Unknown argument: port', 'port: did you mean --http-port?'] },
      {
        proc: spawnDeferflow(['db', 'migrat', '--db', UNOPENABLE_DB]),
        stderr: [
          'error: Invalid values:',
          '  Argument: action, Given: "migrat", Choices: "migrate", "schema", "clean", "generate-key", "rotate-key"',
          'migrat: did you mean migrate?',
        ],
      },
    ];
    // A flag most commands take is named with a few of them.
    const connections = spawnDeferflow(['connections', 'list', '--db', UNOPENABLE_DB]);
    expect(await connections.exitWithin(), connections.describe()).toEqual({ code: 2, signal: null });
    expect(connections.stderr[1]).toMatch(
      /^db: not an option of deferflow connections list; --db is one of \d+ others \(deferflow dags list, deferflow dags pause, deferflow dags reserialize, …\)$/,
    );
    for (const { proc, stderr } of cases) {
      expect(await proc.exitWithin(), proc.describe()).toEqual({ code: 2, signal: null });
      expect(proc.stderr, proc.args.join(' ')).toEqual([...stderr, 'run with --help for usage']);
    }
  });

  it('warns of a mistyped DEFERFLOW_ variable, naming the one it resembles, and goes on with the command', async () => {
    const proc = spawnDeferflow(['--version'], { DEFERFLOW_TRIGERER_CAPACITY: '5', DEFERFLOW_MY_OWN_SETTING: 'x' });
    expect(await proc.exitWithin(), proc.describe()).toEqual({ code: 0, signal: null });
    expect(proc.stderr).toEqual([
      'warning: DEFERFLOW_TRIGERER_CAPACITY is not a deferflow variable and is ignored; did you mean DEFERFLOW_TRIGGERER_CAPACITY?',
    ]);
    expect(proc.text).toHaveLength(1);
    // A variable an earlier version read is named with what replaced it, not with a look-alike.
    const retired = spawnDeferflow(['--version'], { DEFERFLOW_SIGNAL_HTTP_PORT: '8795' });
    expect(await retired.exitWithin(), retired.describe()).toEqual({ code: 0, signal: null });
    expect(retired.stderr).toEqual([
      "warning: DEFERFLOW_SIGNAL_HTTP_PORT is no longer read and is ignored; POST /signals/:key is served on the process's HTTP endpoint: set DEFERFLOW_HTTP_PORT (the triggerer's default with a signal token is 8795)",
    ]);
  });

  it('refuses a database URL of an unsupported kind', async () => {
    const tr = spawnTriggerer(['--db', 'mysql://x']);
    expect(await tr.exitWithin()).toEqual({ code: 2, signal: null });
    expect(tr.stderr.join('\n')).toMatch(/^error \[DF_INVALID_DATABASE_URL\]: .*mysql:\/\/x/);
    expect(tr.stderr.join('\n')).not.toContain('did you mean');
  });

  it('refuses a bare file path as the database, naming the sqlite: URL it was meant as', async () => {
    for (const [given, meant] of [
      ['./deferflow.db', 'sqlite:./deferflow.db'],
      ['/var/lib/deferflow/prod.sqlite', 'sqlite:/var/lib/deferflow/prod.sqlite'],
    ]) {
      const proc = spawnDeferflow(['tasks', 'list', '--run', 'x', '--db', given!]);
      expect(await proc.exitWithin()).toEqual({ code: 2, signal: null });
      expect(proc.stderr.join('\n')).toBe(
        `error [DF_INVALID_DATABASE_URL]: database URL ${JSON.stringify(given)}: expected sqlite:PATH or postgres://USER@HOST:PORT/DATABASE; did you mean ${meant}?`,
      );
    }
  });
});

describe('a started triggerer', () => {
  it('prints its configuration as its first JSON line and exits 0 on SIGTERM', async () => {
    const database = await migrated('sqlite');
    const tr = spawnTriggerer(['--db', database.url, '--log-level', 'info', '--capacity', '7', '--heartbeat-interval', '2', '--health-check-threshold', '9']);

    const start = await tr.waitForLine(isStartLine);
    expect(tr.text[0], 'the configuration is the first line printed').toBe(JSON.stringify(start));
    expect(start.config).toMatchObject({
      databaseUrl: database.url,
      capacity: 7,
      heartbeatIntervalMs: 2000,
      healthCheckThresholdMs: 9000,
      claimsPerLoop: TRIGGERER_OPTIONS.claimsPerLoop.default,
      pollIntervalMs: TRIGGERER_OPTIONS.pollInterval.default * 1000,
      triggerModules: [],
      logLevel: 'info',
      logFormat: 'json',
    });

    await stopCleanly([tr]);
    expect(tr.matching((line) => /stopped/.test(String(line.msg)))).toHaveLength(1);
    const job = await database.db.selectFrom('job').select(['id', 'state', 'end_date', 'capacity']).executeTakeFirstOrThrow();
    expect(job).toMatchObject({ id: start.job_id, state: 'success', capacity: 7 });
    expect(job.end_date).not.toBeNull();
  });

  it('masks the password of a PostgreSQL URL in its printed configuration', async () => {
    const database = await migrated('postgres');
    // The local server trusts its clients and ignores the password; an embedded one checks its own.
    const url = new URL(database.url);
    if (url.password === '') url.password = 'secret';
    const password = url.password;
    const withPassword = url.toString();
    expect(withPassword).toContain(`:${password}@`);

    const tr = spawnTriggerer(['--db', withPassword, '--log-level', 'info']);
    const start = await tr.waitForLine(isStartLine);

    expect(start.msg).toMatch(/started on postgres/);
    expect((start.config as Record<string, unknown>).databaseUrl).toBe(withPassword.replace(`:${password}@`, ':***@'));
    expect(
      tr.text.filter((line) => line.includes(`:${password}@`)),
      'lines showing the password',
    ).toEqual([]);
    await stopCleanly([tr]);
    expect(
      tr.text.filter((line) => line.includes(`:${password}@`)),
      'lines showing the password',
    ).toEqual([]);
  });

  it('prints human-readable lines, not JSON, with --log-format pretty', async () => {
    const database = await migrated('sqlite');
    const tr = spawnTriggerer(['--db', database.url, '--log-format', 'pretty']);

    const started = await textLine(tr, (line) => /triggerer \d+ started on sqlite/.test(line));
    expect(started).toMatch(/INFO/);
    await stopCleanly([tr]);
    expect(tr.lines, 'stdout lines that parse as JSON objects').toEqual([]);
    expect(tr.text.some((line) => /stopped/.test(line))).toBe(true);
  });
});

describe('triggerer --trigger-module', () => {
  it('refuses a .ts module path that does not exist', async () => {
    const missing = './test/fixtures/no-such-trigger-module.ts';
    const tr = spawnTriggerer(['--trigger-module', missing, '--db', UNOPENABLE_DB]);
    expect(await tr.exitWithin(), tr.describe()).toEqual({ code: 2, signal: null });
    const stderr = tr.stderr.join('\n');
    expect(stderr).toContain('DF_TRIGGER_MODULE');
    expect(stderr).toContain(missing);
  });

  it('refuses a .ts module that exports no trigger class', async () => {
    const module = './test/fixtures/no-trigger-module.ts';
    const tr = spawnTriggerer(['--trigger-module', module, '--db', UNOPENABLE_DB]);
    expect(await tr.exitWithin(), tr.describe()).toEqual({ code: 2, signal: null });
    const stderr = tr.stderr.join('\n');
    expect(stderr).toContain('DF_TRIGGER_MODULE');
    expect(stderr).toContain(module);
  });

  it.each(testDialects)('runs a custom trigger from a .ts file without a build step (%s)', async (dialect) => {
    const database = await migrated(dialect);
    const message = `echo from a .ts module ✓ ${process.pid}-${Date.now()}`;
    const id = await createTaskInstance(database);
    const { triggerId } = await openStores(database).taskInstances.deferTaskInstance(
      id,
      new TaskDeferred({ trigger: new EchoTrigger({ message }), method: 'resume', kwargs: { note: 'kept' } }),
    );
    expect((await database.db.selectFrom('trigger').select('classpath').where('id', '=', triggerId).executeTakeFirstOrThrow()).classpath).toBe(
      'custom.EchoTrigger',
    );

    const tr = spawnTriggerer(['--db', database.url, '--trigger-module', './test/fixtures/custom-trigger-module.ts', '--poll-interval', '0.1']);
    const loaded = await tr.waitForLine((line) => Array.isArray(line.classpaths));
    expect(loaded.classpaths).toEqual(['custom.EchoTrigger']);

    await waitFor(async () => (await taskInstance(database, id)).state === 'scheduled', { what: 'the EchoTrigger event' });
    const ti = await taskInstance(database, id);
    expect(ti).toMatchObject({ state: 'scheduled', trigger_id: null, next_method: 'resume' });
    expect(ti).toMatchObject({ next_kwargs: { note: 'kept' }, next_event: message });
    await waitFor(async () => (await database.db.selectFrom('trigger').select('id').where('id', '=', triggerId).execute()).length === 0, {
      what: 'the fired trigger deleted',
    });

    await stopCleanly([tr]);
    expect(
      tr.matching((line) => typeof line.level === 'number' && line.level >= 50),
      'error lines',
    ).toEqual([]);
  });
});
