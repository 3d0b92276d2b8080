import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { knownVariables, mistypedVariableWarnings, RETIRED_VARIABLES } from '../../src/cli/environment-check.ts';
import { REPO_ROOT } from '../support/processes.ts';

const NAMED = /\bDEFERFLOW_[A-Z][A-Z_]*[A-Z]\b/g;

describe('the environment variables deferflow knows', () => {
  it('are every one its sources read and its README and docs/ document, so that none of them is ever called mistyped', () => {
    const sources = readdirSync(path.join(REPO_ROOT, 'src'), { recursive: true, encoding: 'utf8' })
      .filter((file) => file.endsWith('.ts'))
      .flatMap((file) => readFileSync(path.join(REPO_ROOT, 'src', file), 'utf8').match(NAMED) ?? []);
    const readme = ['README.md', ...readdirSync(path.join(REPO_ROOT, 'docs')).map((file) => path.join('docs', file))]
      .filter((file) => file.endsWith('.md'))
      .flatMap((file) => readFileSync(path.join(REPO_ROOT, file), 'utf8').match(NAMED) ?? []);
    const known = knownVariables();
    const notKnown = [...new Set([...sources, ...readme])].filter(
      (name) =>
        !known.has(name) &&
        !name.startsWith('DEFERFLOW_CONN_') && // a connection's, named by the user
        !(name in RETIRED_VARIABLES) && // no longer read: named to say what replaced it
        name !== 'DEFERFLOW_ERROR_EXIT' && // a constant of the CLI, not a variable
        name !== 'DEFERFLOW_TEST_PG_URL' && // the test suite's
        name !== 'DEFERFLOW_TEST_DIALECTS' && // the test suite's
        name !== 'DEFERFLOW_TRIGERER_CAPACITY', // the typo the warning's documentation shows
    );
    expect(notKnown).toEqual([]);
  });

  it('warn of a variable that looks like a typo of one of them, naming it, and of nothing else', () => {
    expect(
      mistypedVariableWarnings({
        DEFERFLOW_TRIGERER_CAPACITY: '5',
        DEFERFLOW_WORKER_CONCURRENCY: '4',
        DEFERFLOW_LOG_LEVLE: 'debug',
        DEFERFLOW_CONN_WAREHOUSE: 'postgres://db/warehouse',
        DEFERFLOW_VERSION: '1.2.3',
        DEFERFLOW_TEST_PG_URL: 'postgres://127.0.0.1/test',
        TRIGGERER_CAPACITY: '5',
      }),
    ).toEqual([
      'warning: DEFERFLOW_TRIGERER_CAPACITY is not a deferflow variable and is ignored; did you mean DEFERFLOW_TRIGGERER_CAPACITY?',
      'warning: DEFERFLOW_LOG_LEVLE is not a deferflow variable and is ignored; did you mean DEFERFLOW_LOG_LEVEL?',
    ]);
  });
});
