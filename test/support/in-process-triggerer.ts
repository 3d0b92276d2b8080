/**
 * A triggerer in the test's own process (the unit tests'; the process tests spawn the binary),
 * apart from fixtures.ts so that a test that does not run one does not load the daemons.
 */
import pino from 'pino';
import { BUILTIN_TRIGGERS } from '../../triggers/index.ts';
import { TriggerRegistry } from '../../src/authoring/triggers/registry.ts';
import { resolveTriggererOptions, type RawTriggererOptions, type TriggererOptions } from '../../src/daemons/triggerer/options.ts';
import { Triggerer } from '../../src/daemons/triggerer/triggerer.ts';
import type { DaemonRuntime } from '../../src/services/jobs/daemon.ts';
import * as testTriggers from '../fixtures/test-triggers.ts';
import { LogCapture, type TestDatabase } from './fixtures.ts';

export interface TestTriggerer {
  readonly triggerer: Triggerer;
  readonly logs: LogCapture;
  stop(): Promise<void>;
}

/**
 * An in-process triggerer on `database`, allowing the built-ins, test/fixtures/test-triggers.ts
 * and the modules named in `raw['trigger-module']` (loaded as --trigger-module loads them).
 */
export async function startTriggerer(
  database: TestDatabase,
  raw: RawTriggererOptions = {},
  internal: Partial<TriggererOptions> = {},
  runtime: DaemonRuntime = {},
): Promise<TestTriggerer> {
  const options = {
    ...resolveTriggererOptions({ pollInterval: 0.1, heartbeatInterval: 0.5, healthCheckThreshold: 3, ...raw, databaseUrl: database.url }, {}),
    ...internal,
  };
  const logs = new LogCapture();
  const log = pino({ level: 'debug' }, logs);
  const registry = new TriggerRegistry(BUILTIN_TRIGGERS);
  for (const cls of Object.values(testTriggers)) {
    if (cls !== testTriggers.UnregisteredTrigger) registry.register(cls as never, 'test');
  }
  for (const module of options.triggerModules) await registry.loadModule(module);
  const triggerer = new Triggerer(database, options, registry, log, runtime);
  await triggerer.start();
  return { triggerer, logs, stop: () => triggerer.stop() };
}
