import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: './test/support/global-setup.ts',
    reporters: ['default', './test/support/summary-reporter.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
    fileParallelism: true,
    // The machine has 2 cores.
    poolOptions: {
      forks: { maxForks: 2, minForks: 1 },
    },
  },
});
