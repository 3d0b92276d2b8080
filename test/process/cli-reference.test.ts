// docs/cli.md, generated from the CLI's --help (scripts/cli-reference.ts), keeps up with it.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { allCommands, helpOf } from '../../scripts/cli-reference.ts';
import { REPO_ROOT } from '../support/processes.ts';

describe('docs/cli.md', () => {
  it('has a section for every command, with every flag its --help shows (npm run docs:cli rewrites it)', async () => {
    const page = readFileSync(path.join(REPO_ROOT, 'docs/cli.md'), 'utf8');
    const sectionOf = (name: string) => {
      const start = page.indexOf(`\n## ${name}\n`);
      return start < 0 ? null : page.slice(start, page.indexOf('\n## ', start + 1) >>> 0);
    };
    const missing = (
      await Promise.all(
        (
          await allCommands()
        ).map(async (args) => {
          const name = ['deferflow', ...args].join(' ');
          const section = sectionOf(name);
          if (section === null) return [`no section for ${name}`];
          const flags = [...(await helpOf(args)).matchAll(/^\s+(?:-\w, )?(--[a-z][a-z-]*)/gm)].map(([, flag]) => flag!);
          return flags.filter((flag) => !section.includes(flag)).map((flag) => `${name}: ${flag}`);
        }),
      )
    ).flat();
    expect(missing).toEqual([]);
  }, 90_000);
});
