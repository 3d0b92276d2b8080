/**
 * Prints one plain closing line, last, after vitest's own summary: "tests: N passed, N failed[, N skipped]",
 * the form CI reads to tell a run that tested something from one that tested nothing. Unhandled
 * errors count as failures, as they fail the run.
 */
import type { Reporter, TestModule } from 'vitest/node';

export default class SummaryReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>, unhandledErrors: ReadonlyArray<unknown>): void {
    let passed = 0;
    let failed = unhandledErrors.length;
    let skipped = 0;
    for (const module of testModules) {
      if (module.state() === 'failed' && [...module.children.allTests()].length === 0) failed++;
      for (const test of module.children.allTests()) {
        const state = test.result().state;
        if (state === 'passed') passed++;
        else if (state === 'failed') failed++;
        else skipped++;
      }
    }
    const line = `tests: ${passed} passed, ${failed} failed${skipped > 0 ? `, ${skipped} skipped` : ''}\n`;
    // After vitest's own summary, which the default reporter prints once this returns.
    process.once('exit', () => process.stdout.write(line));
  }
}
