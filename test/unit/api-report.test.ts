// The public surface is reviewed: each entry point's API report (docs/api/, made from the built
// declarations by api-extractor) is committed, and a change to the surface without its report
// fails here. `npm run api` writes the reports to commit with the change.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Extractor, ExtractorConfig } from '@microsoft/api-extractor';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../support/processes.ts';

describe.each([
  ['deferflow', 'api-extractor.json', 'docs/api/deferflow.api.md'],
  ['deferflow/internals', 'api-extractor.internals.json', 'docs/api/deferflow-internals.api.md'],
])('the API of %s', (_entry, config, report) => {
  it('is the committed report (npm run api writes it)', () => {
    const result = Extractor.invoke(ExtractorConfig.loadFileAndPrepare(path.join(REPO_ROOT, config)), {
      localBuild: false,
      showVerboseMessages: false,
      messageCallback: (message) => {
        message.handled = true; // the report holds what matters; the run's own output is noise here
      },
    });
    expect(result.apiReportChanged, `${report} differs from the built declarations: run npm run api and commit the report`).toBe(false);
  });

  it('documents every name it exports (a JSDoc line each)', () => {
    // A warning at column 1 is an exported name's (members' are not held to this yet).
    const names = [...readFileSync(path.join(REPO_ROOT, report), 'utf8').matchAll(/:\d+:1 - \(ae-undocumented\) Missing documentation for "([^"]+)"/g)].map(
      ([, name]) => name,
    );
    expect(names).toEqual([]);
  });
});
