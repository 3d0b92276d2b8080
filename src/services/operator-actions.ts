import os from 'node:os';
import type { Database } from '../database/connect.ts';
import type { AuditSource } from '../database/schema.ts';
import type { InputResponse } from '../model/human-input.ts';
import { withDownstream } from '../model/scheduler-dag.ts';
import { openStores, type AuditEntry, type MarkedState, type Stores, type TaskInput } from '../storage/index.ts';
import { InvalidOptionError } from '../vocabulary/errors.ts';
import type { JsonValue } from '../vocabulary/serialization/json.ts';
import { serializedDagSource } from './dags/dag-processor.ts';
import { triggerDagRun, type ManualRunOptions } from './dags/manual-run.ts';
import { unknownDagError } from './dags/unknown-dag.ts';
import { InputService, type GivenAnswer } from './human-input/input-service.ts';
import { SignalService } from './signals/signal-service.ts';

/*
 * What a person does to the work in the database, the same from the CLI and from the status
 * page: trigger a run, clear task instances (and those downstream), mark one success or failed,
 * pause or unpause a DAG, send a signal, answer a question. Each is the storage operation the
 * scheduler and workers already respect, followed by one audit log entry naming who, from
 * where, what and what came of it. A refused action (an unknown DAG, nothing to clear) changes
 * nothing and is not logged; its error names what was wrong.
 */

/** Who acts, and from where (recorded with each action). */
export interface Actor {
  /** A name: the operator's (basic auth's user name on the status page), or the OS user of a CLI. */
  readonly name: string;
  readonly source: AuditSource;
  /** The web client's address, or the CLI's host. */
  readonly address: string | null;
}

/** The actor of a CLI command: the OS user on this host. */
export function cliActor(): Actor {
  return { name: os.userInfo().username, source: 'cli', address: os.hostname() };
}

/** What to clear of a run. */
export interface ClearRequest {
  /** The run's id. */
  readonly runId: string;
  /** Its DAG; needed only when two DAGs have runs of that id. */
  readonly dagId?: string;
  /** Only these tasks. @default every task of the run */
  readonly taskIds?: readonly string[];
  /**
   * Of the tasks named, only the task instances of these map indices (one instance of a mapped
   * task); the tasks downstream are cleared whole. @default every map index
   */
  readonly mapIndexes?: readonly number[];
  /** The tasks downstream of those too. @default false */
  readonly downstream?: boolean;
  /** Keep their durable state (context.state). @default false */
  readonly keepState?: boolean;
}

/** What a clear did. */
export interface ClearOutcome {
  readonly dagId: string;
  readonly runId: string;
  /** The task ids cleared, sorted. */
  readonly taskIds: readonly string[];
  readonly cleared: number;
  readonly deletedTriggers: number;
}

/** What a mark did. */
export interface MarkOutcome {
  readonly dagId: string;
  readonly runId: string;
  readonly taskId: string;
  /** It is now in the state asked for (false: already was, or running: see stopRequested). */
  readonly marked: boolean;
  /** It was running: its worker ends the try in that state. */
  readonly stopRequested: boolean;
}

export class OperatorActions {
  readonly #database: Database;
  readonly #stores: Stores;
  readonly #actor: Actor;
  /** The id of the audit entry of the last action done (the status page shows it as the notice). */
  lastAuditId: number | null = null;

  constructor(database: Database, actor: Actor) {
    this.#database = database;
    this.#stores = openStores(database);
    this.#actor = actor;
  }

  /** A manual run of a DAG (see triggerDagRun); resolves with its run id. */
  async triggerRun(dagId: string, options: ManualRunOptions = {}): Promise<string> {
    const runId = await triggerDagRun(this.#database, dagId, options);
    await this.#audit({ action: 'trigger_run', dagId, runId, details: { conf_keys: Object.keys(options.conf ?? {}) }, outcome: `run ${runId} queued` });
    return runId;
  }

  /**
   * Airflow's clear: the run's task instances (some, and optionally those downstream) go back to
   * no state for the scheduler to run again, with their retries renewed from the DAG; a finished
   * run runs again. Refused (DF_INVALID_OPTION naming run, dag or task) when the run is unknown,
   * ambiguous or of a DAG no longer serialized, or when it names no task of the run.
   */
  async clear(request: ClearRequest): Promise<ClearOutcome> {
    const { dagId, runId, dag, chosen } = await this.#chooseToClear(request);
    const retriesOf = new Map(dag.tasks.map((task) => [task.taskId, task.retry.retries]));
    const result = await this.#stores.taskInstances.clearTaskInstances(
      chosen.map((ti) => ({ id: ti.id, retries: retriesOf.get(ti.taskId) ?? 0 })),
      { keepState: request.keepState === true },
    );
    await this.#rerunIfFinished(dagId, runId);
    const taskIds = [...new Set(chosen.map((ti) => ti.taskId))].sort();
    await this.#audit({
      action: 'clear',
      dagId,
      runId,
      taskInstanceId: chosen.length === 1 ? chosen[0]!.id : null,
      details: { task_ids: taskIds, downstream: request.downstream === true, keep_state: request.keepState === true },
      outcome: `cleared ${result.cleared} task instance(s); stopped ${result.deletedTriggers} trigger(s)`,
    });
    return { dagId, runId, taskIds, cleared: result.cleared, deletedTriggers: result.deletedTriggers };
  }

  /** What a clear would clear, without clearing it (the status page's confirmation); refused as clear is. */
  async planClear(request: ClearRequest): Promise<{ dagId: string; runId: string; taskIds: string[] }> {
    const { dagId, runId, chosen } = await this.#chooseToClear(request);
    return { dagId, runId, taskIds: [...new Set(chosen.map((ti) => ti.taskId))].sort() };
  }

  /**
   * Marks one task instance success or failed (Airflow's mark): one that waits ends now, one
   * running is ended so by its worker; a finished run is looked at again by the scheduler (its
   * state follows from its task instances). DF_INVALID_OPTION for an unknown task instance.
   */
  async mark(taskInstanceId: number, state: MarkedState): Promise<MarkOutcome> {
    const ti = Number.isSafeInteger(taskInstanceId) ? await this.#stores.taskInstances.readTaskInstance({ id: taskInstanceId }) : null;
    if (!ti) throw new InvalidOptionError('task-instance', `there is no task instance ${taskInstanceId}`);
    const result = await this.#stores.taskInstances.markTaskInstances([ti.id], state);
    if (result.marked > 0) await this.#rerunIfFinished(ti.dag_id, ti.run_id);
    const outcome =
      result.marked > 0
        ? `marked ${state} (was ${ti.state ?? 'no state'})${result.deletedTriggers > 0 ? `; stopped ${result.deletedTriggers} trigger(s)` : ''}`
        : result.stopRequested > 0
          ? `running: its worker is asked to end the try as ${state}`
          : `already ${ti.state ?? 'no state'}: nothing changed`;
    await this.#audit({ action: `mark_${state}`, dagId: ti.dag_id, runId: ti.run_id, taskInstanceId: ti.id, details: { task_id: ti.task_id }, outcome });
    return { dagId: ti.dag_id, runId: ti.run_id, taskId: ti.task_id, marked: result.marked > 0, stopRequested: result.stopRequested > 0 };
  }

  /** Pauses or unpauses a DAG; DF_INVALID_OPTION naming dag-id for a DAG the database does not have. */
  async setPaused(dagId: string, paused: boolean): Promise<void> {
    if (!(await this.#stores.serializedDags.setDagPaused(dagId, paused))) throw await unknownDagError(this.#database, dagId, 'dag-id');
    await this.#audit({ action: paused ? 'pause' : 'unpause', dagId, outcome: `DAG ${dagId} ${paused ? 'paused' : 'unpaused'}` });
  }

  /** Sends a signal; resolves with its version. Its value is not copied into the log (it is kept, sealed if secret, with the signal). */
  async sendSignal(key: string, value: JsonValue = null): Promise<number> {
    const { name, source, address } = this.#actor;
    const version = await SignalService.of(this.#database).send(key, value, `${name} (${source}${address === null ? '' : `, ${address}`})`);
    await this.#audit({ action: 'signal', details: { key, version }, outcome: `signal ${key} version ${version} sent` });
    return version;
  }

  /**
   * Answers a task instance's question (who answered is the actor); see InputService.respond for
   * what is refused. `via`: how the response is recorded to have come (a web actor's: the status
   * page's form, or `http`, the respond API). @default page for a web actor, cli for a CLI one
   */
  async respond(taskInstanceId: number, answer: Omit<GivenAnswer, 'by'>, via?: 'page' | 'http' | 'cli'): Promise<InputResponse> {
    const source = via ?? (this.#actor.source === 'web' ? 'page' : 'cli');
    const response = await InputService.of(this.#database).respond(taskInstanceId, { ...answer, by: this.#actor.name }, source);
    const ti = await this.#stores.taskInstances.readTaskInstance({ id: taskInstanceId });
    await this.#auditResponse(response, { id: taskInstanceId, dagId: ti?.dag_id ?? null, runId: ti?.run_id ?? null });
    return response;
  }

  /**
   * Answers the question a signed link was made for (the actor: who the form says answers, from
   * the link's page); `question`: the link's question, when the caller read it already.
   */
  async respondByLink(token: string, answer: Omit<GivenAnswer, 'by'>, question?: TaskInput): Promise<InputResponse> {
    const service = InputService.of(this.#database);
    question ??= await service.questionOfLink(token);
    const response = await service.respondByLink(token, { ...answer, by: this.#actor.name });
    await this.#auditResponse(response, { id: question.taskInstanceId, dagId: question.dagId, runId: question.runId });
    return response;
  }

  async #auditResponse(response: InputResponse, ti: { readonly id: number; readonly dagId: string | null; readonly runId: string | null }): Promise<void> {
    await this.#audit({
      action: 'respond',
      dagId: ti.dagId,
      runId: ti.runId,
      taskInstanceId: ti.id,
      details: { chosen: [...response.chosen], via: response.source },
      outcome: `answered${response.chosen.length > 0 ? `: ${response.chosen.join(', ')}` : ''}`,
    });
  }

  async #chooseToClear(request: ClearRequest) {
    const { runId } = request;
    const ofRun = await this.#stores.taskInstances.taskInstancesOfRunId(runId, request.dagId);
    const dagIds = [...new Set(ofRun.map((ti) => ti.dagId))];
    if (dagIds.length === 0)
      throw new InvalidOptionError('run', `no task instances of run ${JSON.stringify(runId)}${request.dagId ? ` of DAG ${request.dagId}` : ''}`);
    if (dagIds.length > 1)
      throw new InvalidOptionError('dag', `${dagIds.length} DAGs have a run ${JSON.stringify(runId)} (${dagIds.join(', ')}): name one with --dag`);
    const dagId = dagIds[0]!;
    const dag = await serializedDagSource(this.#database)(dagId);
    // Clearing renews each try budget from the task's retries, which only the serialized DAG holds.
    if (!dag)
      throw new InvalidOptionError(
        'run',
        `run ${JSON.stringify(runId)} is of DAG ${dagId}, which is not among the serialized DAGs (deleted, or never processed): nothing is cleared; put its file back in the DAG folder (deferflow dags reserialize) and clear again`,
      );
    const named = request.taskIds && request.taskIds.length > 0 ? new Set(request.taskIds) : null;
    const wanted = named !== null && request.downstream ? withDownstream(dag, named) : named;
    const indexes = named !== null && request.mapIndexes && request.mapIndexes.length > 0 ? new Set(request.mapIndexes) : null;
    const chosen = ofRun.filter((ti) => (wanted === null || wanted.has(ti.taskId)) && (indexes === null || !named!.has(ti.taskId) || indexes.has(ti.mapIndex)));
    if (chosen.length === 0) throw new InvalidOptionError('task', `nothing to clear in run ${runId} of DAG ${dagId}`);
    return { dagId, runId, dag, chosen };
  }

  /** A finished run with task instances cleared or marked runs again: the scheduler decides its state anew. */
  async #rerunIfFinished(dagId: string, runId: string): Promise<void> {
    const run = await this.#stores.dagRuns.findDagRun(dagId, runId);
    if (run && (run.state === 'success' || run.state === 'failed')) await this.#stores.dagRuns.setDagRunState(run.id, run.state, 'queued');
  }

  async #audit(entry: Omit<AuditEntry, 'actor' | 'source' | 'address'>): Promise<void> {
    this.lastAuditId = await this.#stores.audit.appendAuditEntry({
      ...entry,
      actor: this.#actor.name,
      source: this.#actor.source,
      address: this.#actor.address,
    });
  }
}
