/**
 * deferflow: deferrable tasks and a triggerer daemon. This entry is what DAG and trigger authors
 * and embedders use: operators, triggers, sensors, `Dag`, events, errors, signals, and
 * `deferflow({...})` with its options. The daemon classes, storage and table types are in
 * `deferflow/internals`. Its API report is docs/api/deferflow.api.md.
 *
 * @packageDocumentation
 */
export * from './authoring/public-api.ts';
export {
  latestSignalVersion,
  listSignals,
  listenSignal,
  sendSignal,
  type SignalListener,
  type SignalServiceOptions,
  type SignalSubscription,
} from './services/signals/signal-service.ts';
export { deferTaskInstance, resumeTaskInstance } from './services/deferral.ts';
export { createTaskInstance, readTaskInstance, type NewTaskInstanceFields, type TaskInstance } from './services/task-instances.ts';
export { openDatabase, type Database } from './database/connect.ts';
export { deferflow, Deferflow } from './app/deferflow.ts';
export type { DeferflowConfig, DeferflowOptions, SchedulerConfig, TriggererConfig, WorkerConfig } from './app/config.ts';
export type { TraceExporter, TracingConfig } from './services/observability/tracing.ts';
export type { GivenAnswer } from './services/human-input/input-service.ts';

// This module, deferflow/internals and the built-in triggers' are the ones a DAG file or trigger
// module importing deferflow gets (not a second copy of the library): see shareWithUserCode.
import * as publicApi from './index.ts';
import * as internals from './internals.ts';
import * as builtinTriggers from '../triggers/index.ts';
import { shareWithUserCode } from './authoring/user-code/shared-modules.ts';

// Each entry's file as the package's exports name it: from the sources, beside this one; built,
// this module is in dist/src/bundle/ and the package's entry files are above it (scripts/build.ts).
const fromSources = import.meta.url.endsWith('.ts');
const entryFile = (source: string, built: string) => new URL(fromSources ? source : built, import.meta.url).href;
shareWithUserCode(entryFile('./index.ts', '../index.js'), publicApi, 'authoring');
shareWithUserCode(entryFile('./internals.ts', '../internals.js'), internals, 'on-use');
shareWithUserCode(entryFile('../triggers/index.ts', '../../triggers/index.js'), builtinTriggers);
