import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';
import LongestFirstSequencer from './test/support/longest-first-sequencer.ts';

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
    // A hang fails at a minute. Tests that spawn processes ran up to 19 s with no timeout of their
    // own in a run loaded by other work (and one, since made faster, over 30 s): each test whose
    // ordinary time is longer says so itself.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    sequence: { sequencer: LongestFirstSequencer },
    pool: 'forks',
    fileParallelism: true,
    // The machine has 2 cores, but much of the suite waits (on timers, the database, spawned
    // daemons): measured on it, the whole suite took 551 s in 2 forks, 427 s in 3 and 431 s in 4.
    // `npm run test:unit` asks for 4: in-process tests wait more still, and 4 finish them in about
    // 45 s where 2 take 68.
    poolOptions: {
      forks: { maxForks: 3, minForks: 1 },
    },
  },
});
