// The public surface is reviewed: each entry point's API report (docs/api/, made from the built
// declarations by api-extractor) is committed, and a change to the surface without its report
// fails here. `npm run api` writes the reports to commit with the change.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Extractor, ExtractorConfig, type ExtractorResult } from '@microsoft/api-extractor';
import { beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../support/processes.ts';

describe.each([
  // deferflow: every name and every member documented; deferflow/internals: every exported name.
  ['deferflow', 'api-extractor.json', 'docs/api/deferflow.api.md', true],
  ['deferflow/internals', 'api-extractor.internals.json', 'docs/api/deferflow-internals.api.md', false],
])('the API of %s', (_entry, config, report, membersToo) => {
  let result: ExtractorResult;
  /** Names without a JSDoc comment, as file:line name. */
  const undocumented: string[] = [];
  beforeAll(() => {
    result = Extractor.invoke(ExtractorConfig.loadFileAndPrepare(path.join(REPO_ROOT, config)), {
      localBuild: false,
      messageCallback: (message) => {
        if (message.messageId === 'ae-undocumented' && (membersToo || declaresExport(message.sourceFilePath, message.sourceFileLine))) {
          undocumented.push(`${message.sourceFilePath}:${message.sourceFileLine} ${message.text}`);
        }
        message.handled = true; // the report holds what matters; the run's own output is noise here
      },
    });
  });

  it('is the committed report (npm run api writes it)', () => {
    expect(result.apiReportChanged, `${report} differs from the built declarations: run npm run api and commit the report`).toBe(false);
  });

  it(`documents every name it exports${membersToo ? ' and each of their members' : ''} (a JSDoc line each)`, () => {
    expect(undocumented).toEqual([]);
  });
});

/** Whether the source line a message points at declares an exported name (rather than a member). */
function declaresExport(file: string | undefined, line: number | undefined): boolean {
  if (file === undefined || line === undefined) return true;
  return /^export\b/.test(readFileSync(file, 'utf8').split('\n')[line - 1] ?? '');
}
