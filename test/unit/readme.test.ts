// The README and docs/ stay true where they restate code (the options, the error codes, the
// commands), the README stays a front door, and every link between them resolves.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { TRIGGERER_OPTIONS } from '../../src/internals.ts';
import { ERROR_CODES } from '../../src/vocabulary/errors.ts';
import { SCHEDULER_OPTIONS } from '../../src/daemons/scheduler/options.ts';
import { STANDALONE_OPTIONS } from '../../src/app/standalone/options.ts';
import { WORKER_OPTIONS } from '../../src/daemons/worker/options.ts';
import { WEB_COMMAND_OPTIONS } from '../../src/cli/web-command.ts';
import { flagOf, flagsOf } from '../../src/vocabulary/options/option-table.ts';
import { REPO_ROOT } from '../support/processes.ts';

const readme = readFileSync(path.join(REPO_ROOT, 'README.md'), 'utf8');
const DOCS = readdirSync(path.join(REPO_ROOT, 'docs'))
  .filter((file) => file.endsWith('.md'))
  .map((file) => path.join('docs', file));
const doc = (file: string) => readFileSync(path.join(REPO_ROOT, file), 'utf8');
const configuration = doc('docs/configuration.md');
const packageJson = JSON.parse(readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };

describe('README and docs/', () => {
  it.each(Object.entries(TRIGGERER_OPTIONS).map(([field, spec]) => [flagOf(field, spec), spec] as const))(
    'documents --%s with its environment variable and default',
    (name, spec) => {
      const row = configuration.split('\n').find((line) => line.startsWith(`| \`--${name}\` |`));
      expect(row, `a configuration table row for --${name}`).toBeDefined();
      const cells = row!.split('|').map((cell) => cell.trim());
      expect(cells[2]).toBe(`\`${spec.env}\``);
      const documentedDefault = Array.isArray(spec.default) || spec.default === '' ? 'none' : `\`${spec.default}\``;
      expect(cells[3]).toBe(documentedDefault);
    },
  );

  it('documents no option no command has, each once', () => {
    const documented = [...configuration.matchAll(/^\| `--([a-z-]+)` \|/gm)].map((match) => match[1]!);
    const known = new Set(
      [TRIGGERER_OPTIONS, WORKER_OPTIONS, SCHEDULER_OPTIONS, STANDALONE_OPTIONS, WEB_COMMAND_OPTIONS].flatMap((table) =>
        flagsOf(table).map(({ flag }) => flag),
      ),
    );
    expect(documented.filter((name) => !known.has(name))).toEqual([]);
    expect(new Set(documented).size).toBe(documented.length);
  });

  it.each([
    ['worker', WORKER_OPTIONS],
    ['scheduler', SCHEDULER_OPTIONS],
    ['standalone', STANDALONE_OPTIONS],
    ['web', WEB_COMMAND_OPTIONS],
  ] as const)('names every option of deferflow %s', (_command, table) => {
    const everything = [readme, ...DOCS.map(doc)].join('\n');
    const missing = flagsOf(table)
      .map(({ flag }) => flag)
      .filter((name) => !everything.includes(`\`--${name}\``));
    expect(missing).toEqual([]);
  });

  it('documents exactly the error codes deferflow has, one row each', () => {
    const documented = [...doc('docs/error-codes.md').matchAll(/^\| `(DF_[A-Z_]+)` \| \S/gm)].map((match) => match[1]);
    expect(documented.slice().sort()).toEqual([...ERROR_CODES].sort());
    expect(new Set(documented).size).toBe(documented.length);
  });

  it('no error is thrown without a code: src/ and triggers/ raise deferflow errors only, never a bare Error', () => {
    const files = ['src', 'triggers'].flatMap((dir) =>
      readdirSync(path.join(REPO_ROOT, dir), { recursive: true, encoding: 'utf8' })
        .filter((file) => file.endsWith('.ts'))
        .map((file) => path.join(dir, file)),
    );
    const bare = files.flatMap((file) =>
      readFileSync(path.join(REPO_ROOT, file), 'utf8')
        .split('\n')
        .flatMap((line, i) => (/new (Error|TypeError|RangeError)\(/.test(line) && !line.trim().startsWith('//') ? [`${file}:${i + 1}: ${line.trim()}`] : [])),
    );
    expect(bare).toEqual([]);
  });

  it('states the failover figures it measured, with the command that measures them', () => {
    const production = doc('docs/production.md').replace(/\s+/g, ' ');
    const benchmarks = doc('docs/benchmarks.md').replace(/\s+/g, ' ');
    expect(benchmarks).toContain('npm run bench:failover');
    for (const fault of [
      'SIGTERM \\(graceful: cleanups, release, wake\\)',
      'SIGKILL \\(crash: the liveness lock\\)',
      'SIGSTOP \\(frozen: the heartbeat threshold\\)',
    ]) {
      expect(benchmarks).toMatch(new RegExp(`\\| ${fault} \\| [\\d,]+ / [\\d,]+ ms[^|]* \\| [\\d,]+ / [\\d,]+ ms[^|]* \\| [\\d,]+ / [\\d,]+ ms \\|`));
    }
    expect(benchmarks).toContain('Every trial: `lost` 0, `moved_twice` 0, `false_takeovers` 0.');
    expect(packageJson.scripts['bench:failover']).toContain('bench/failover-bench.ts');
    expect(production).toContain('liveness lock');
  });

  it('keeps the README a front door: at most 300 lines', () => {
    expect(readme.split('\n').length).toBeLessThanOrEqual(300);
  });

  it('links only to files and headings that exist', () => {
    const broken = ['README.md', ...DOCS].flatMap((file) =>
      [
        ...doc(file)
          .replace(/^```[\s\S]*?^```$/gm, '')
          .matchAll(/\]\(([^)\s]+)\)/g),
      ]
        .map(([, target]) => target!)
        .filter((target) => !/^[a-z]+:/.test(target))
        .filter((target) => {
          const [relative, anchor] = target.split('#') as [string, string | undefined];
          const resolved = relative === '' ? file : path.join(path.dirname(file), relative);
          if (!existsSync(path.join(REPO_ROOT, resolved))) return true;
          return anchor !== undefined && resolved.endsWith('.md') && !headingAnchors(doc(resolved)).has(anchor);
        })
        .map((target) => `${file}: ${target}`),
    );
    expect(broken).toEqual([]);
  });

  it('gives the two set-up commands, and they name scripts package.json has', () => {
    expect(readme).toContain('npm install && npm start');
    expect(readme).toContain('npm install && npm test');
    expect(packageJson.scripts.start).toBeDefined();
    expect(packageJson.scripts.test).toBe('vitest run');
  });
});

describe('docker-compose.yml', () => {
  it('runs only commands the CLI has, with the demo DAG folder mounted where the worker reads it', async () => {
    const compose = readFileSync(path.join(REPO_ROOT, 'docker-compose.yml'), 'utf8');
    const commands = [...compose.matchAll(/command: \["([a-z]+)"/g)].map((match) => match[1]);
    expect(commands.sort()).toEqual(['db', 'scheduler', 'triggerer', 'triggerer', 'worker']);
    expect(compose).toContain('./examples/dags:/app/examples/dags:ro');
    expect(compose).toContain('"--dags", "/app/examples/dags"');
  });
});

/** The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens. */
function headingAnchors(markdown: string): Set<string> {
  const headings = [...markdown.replace(/^```[\s\S]*?^```$/gm, '').matchAll(/^#{1,6} (.+)$/gm)].map(([, heading]) => heading!);
  return new Set(
    headings.map((heading) =>
      heading
        .toLowerCase()
        .replace(/[^a-z0-9 _-]/g, '')
        .replace(/ /g, '-'),
    ),
  );
}
