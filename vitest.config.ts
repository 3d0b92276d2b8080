import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  // In-process tests use the sources under their package name (as tsconfig.json's paths do);
  // spawned deferflow processes run the build.
  resolve: {
    alias: [
      { find: /^deferflow$/, replacement: fileURLToPath(new URL('./src/index.ts', import.meta.url)) },
      { find: /^deferflow\/internals$/, replacement: fileURLToPath(new URL('./src/internals.ts', import.meta.url)) },
      { find: /^deferflow\/triggers$/, replacement: fileURLToPath(new URL('./triggers/index.ts', import.meta.url)) },
    ],
  },
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['./test/support/build-package.ts', './test/support/global-setup.ts'],
    reporters: ['default', './test/support/summary-reporter.ts'],
    // Standalone serves /metrics and /health on a fixed port by default; test processes run many
    // at once, so they serve only where a test asks (with --http-port).
    // Task runner processes cost most of a second of CPU each to start, and hundreds of test
    // processes would start them: spawned daemons run task code on their own loop unless a test
    // asks for runners (RUNNER_PROCESSES in test/support/processes.ts: the isolation tests, the
    // runtime-process tests, the chaos run). The embedded API reads no environment: in-process
    // tests use runners, the default, except where a test says taskIsolation: 'none' (the sensor
    // and signal tests, whose tasks need no isolation: runners cost sensor-modes.test.ts 75 of
    // its 99 s of CPU).
    env: { DEFERFLOW_HTTP_PORT: 'off', DEFERFLOW_TASK_ISOLATION: 'none' },
    testTimeout: 30_000,
    hookTimeout: 60_000,
    pool: 'forks',
    fileParallelism: true,
    // The machine has 2 cores, and the whole suite keeps both busy (spawned daemons, the hogs and
    // spinning tasks some tests start on purpose). `npm run test:unit` asks for 4 forks: in-process
    // tests mostly wait on timers and the database, and 4 finish them in about 45 s where 2 take 68.
    poolOptions: {
      forks: { maxForks: 2, minForks: 1 },
    },
  },
});
