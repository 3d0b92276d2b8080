import { closestName } from '../../vocabulary/suggest.ts';
import type { Database } from '../../database/connect.ts';
import { toSchedulerDag } from '../../authoring/dags/serialized-dag.ts';
import type { JsonValue } from '../../vocabulary/serialization/json.ts';
import { openStores } from '../../storage/index.ts';
import { matches, SignalTrigger } from '../../authoring/triggers/signal-trigger.ts';

/**
 * Who a signal just sent on a key reaches: what `deferflow signal send` says on stderr when it is
 * nobody (a mistyped key is stored and acted on by nothing), and what POST /signals/:key answers.
 */
export interface SignalAudience {
  /** Deferred task instances whose signal wait it fires (waiting on the key, the value matching). */
  readonly waits: number;
  /** Task instances of unfinished DAG runs with a start, restart or stop action on the key. */
  readonly signalActions: number;
  /** DAGs scheduled on the key (a run per signal). */
  readonly scheduledDags: readonly string[];
  /** The known key (waited on, acted on, scheduled on) most like this one, when it reaches nobody; else null. */
  readonly closestKey: string | null;
}

/** Whether the signal reached no wait, no signal action and no DAG schedule. */
export function reachesNobody(audience: SignalAudience): boolean {
  return audience.waits === 0 && audience.signalActions === 0 && audience.scheduledDags.length === 0;
}

/** What is said of a signal that reaches nobody: it is kept, for waits to come, and the closest known key. */
export function nobodyWarning(key: string, version: number, audience: SignalAudience): string {
  return (
    `no task waits on signal key ${key} and no DAG is scheduled on it; it is stored (version ${version}) for waits to come` +
    (audience.closestKey === null ? '' : `. Did you mean ${audience.closestKey}?`)
  );
}

/**
 * Who a signal on `key` with `value` will reach, read just before it is sent: every wait on the
 * key then is on a version below the one the send gets, so it fires if the value matches. Read
 * after, a triggerer quick to fire them would already have moved them on.
 */
export async function signalAudience(database: Database, key: string, value: JsonValue): Promise<SignalAudience> {
  const storage = openStores(database);
  const [triggerWaits, signalActions, dags] = await Promise.all([
    storage.triggers.signalTriggerWaits(SignalTrigger.classpath),
    storage.signals.countSignalActionTasks(key),
    storage.serializedDags.listSerializedDags(),
  ]);
  const knownKeys = new Set<string>();
  let waits = 0;
  for (const wait of triggerWaits) {
    // Kwargs this process cannot open (another key) say nothing: they are neither counted nor known.
    if (typeof wait.kwargs !== 'string') continue;
    const kwargs = JSON.parse(wait.kwargs) as { key?: unknown; sinceVersion?: unknown; match?: JsonValue };
    if (typeof kwargs.key !== 'string') continue;
    knownKeys.add(kwargs.key);
    if (kwargs.key === key && (kwargs.match === undefined || matches(value, kwargs.match))) waits += wait.waiting;
  }
  // A DAG scheduled on the key spells it, quoted, in its JSON: only those are parsed, unless the
  // signal reaches nobody and every key a DAG knows is looked through for the closest.
  const quotedKey = JSON.stringify(key);
  const scheduledDags = dags.filter((dag) => dag.dataJson.includes(quotedKey) && dagSignalKeys(dag)?.schedule === key).map((dag) => dag.dagId);
  const audience = { waits, signalActions, scheduledDags };
  if (!reachesNobody({ ...audience, closestKey: null })) return { ...audience, closestKey: null };
  for (const dag of dags) {
    const keys = dagSignalKeys(dag);
    if (keys?.schedule != null) knownKeys.add(keys.schedule);
    for (const actionKey of keys?.actions ?? []) knownKeys.add(actionKey);
  }
  for (const actionKey of await storage.signals.signalActionKeys()) knownKeys.add(actionKey);
  knownKeys.delete(key);
  return { ...audience, closestKey: closestName(key, knownKeys) };
}

/** The key a serialized DAG is scheduled on (or null) and those its tasks act on; null if this version cannot read it. */
function dagSignalKeys({ dagId, dataJson }: { readonly dagId: string; readonly dataJson: string }): { schedule: string | null; actions: string[] } | null {
  let dag: ReturnType<typeof toSchedulerDag>;
  try {
    dag = toSchedulerDag(dagId, dataJson, '');
  } catch {
    return null; // a DAG this version cannot read: the scheduler says so; it is nobody here
  }
  return { schedule: dag.signalSchedule?.key ?? null, actions: dag.tasks.flatMap((task) => task.signalActions.map((action) => action.key)) };
}
