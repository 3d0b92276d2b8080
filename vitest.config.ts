import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  // In-process tests use the sources under their package name (as tsconfig.json's paths do);
  // spawned deferflow processes run the build.
  resolve: {
    alias: [
      { find: /^deferflow$/, replacement: fileURLToPath(new URL('./src/index.ts', import.meta.url)) },
      { find: /^deferflow\/triggers$/, replacement: fileURLToPath(new URL('./triggers/index.ts', import.meta.url)) },
    ],
  },
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['./test/support/build-package.ts', './test/support/global-setup.ts'],
    reporters: ['default', './test/support/summary-reporter.ts'],
    // Standalone serves /metrics and /health on a fixed port by default; test processes run many
    // at once, so they serve only where a test asks (with --http-port).
    env: { DEFERFLOW_HTTP_PORT: 'off' },
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
