// The public surface is reviewed: each entry point's API report (docs/api/, made from the built
// declarations by api-extractor) is committed, and a change to the surface without its report
// fails here. `npm run api` writes the reports to commit with the change.
import path from 'node:path';
import { Extractor, ExtractorConfig, type ExtractorResult } from '@microsoft/api-extractor';
import { beforeAll, describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../support/processes.ts';

describe.each([
  ['deferflow', 'api-extractor.json', 'docs/api/deferflow.api.md'],
  ['deferflow/internals', 'api-extractor.internals.json', 'docs/api/deferflow-internals.api.md'],
])('the API of %s', (_entry, config, report) => {
  let result: ExtractorResult;
  /** Names without a JSDoc comment, as file:line name. */
  const undocumented: string[] = [];
  beforeAll(() => {
    result = Extractor.invoke(ExtractorConfig.loadFileAndPrepare(path.join(REPO_ROOT, config)), {
      localBuild: false,
      messageCallback: (message) => {
        if (message.messageId === 'ae-undocumented') {
          undocumented.push(`${message.sourceFilePath}:${message.sourceFileLine} ${message.text}`);
        }
        message.handled = true; // the report holds what matters; the run's own output is noise here
      },
    });
  });

  it('is the committed report (npm run api writes it)', () => {
    expect(result.apiReportChanged, `${report} differs from the built declarations: run npm run api and commit the report`).toBe(false);
  });

  it('documents every name it exports and each of their members (a JSDoc line each)', () => {
    expect(undocumented).toEqual([]);
  });
});
