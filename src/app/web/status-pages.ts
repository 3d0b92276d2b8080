import { fileURLToPath } from 'node:url';
import { groupBy } from '../../vocabulary/group-by.ts';
import { SecretMasker } from '../../services/logs/secret-masker.ts';
import { DAG_RUN_STATES, fromDbTime, type DagRunState } from '../../database/schema.ts';
import type { Database } from '../../database/connect.ts';
import { toSchedulerDag } from '../../authoring/dags/serialized-dag.ts';
import { JOB_TYPES, judgeJobs, type LivenessThresholds } from '../../services/jobs/job-liveness.ts';
import { livenessLocksOf, type LivenessLocks } from '../../database/liveness-locks.ts';
import { describeSchedule, nextDueAt, type StoredSchedule } from '../../model/schedule.ts';
import type { HttpReply, HttpRequest } from '../../services/observability/http-server.ts';
import { type DagRunRow, type GridCell, type JobListing, type StateChange, type StoredLogLine, openStores, type Stores } from '../../storage/index.ts';
import { slotTime, stateSpans } from '../../model/state-timeline.ts';
import { Html, href, html, isoMoment, page, stateBadge } from './html.ts';
import { ago } from '../../vocabulary/time/readable-duration.ts';
import { InputService } from '../../services/human-input/input-service.ts';
import { inputRoutes, questionPage } from './input-pages.ts';
import { WebAccess } from './access.ts';
import { chartsPage } from './charts-page.ts';
import { actionRoutes, auditPage, doneNotice, formsFor, needsOperator, type OperatorForms, signalKeyPage, signalsPage, triggerForm } from './action-pages.ts';
import { describeUnserved, readQueueCoverage, unservedWork } from '../../services/jobs/queue-coverage.ts';

/** Rows on one page of a long list (deferred task instances, triggers). */
export const PAGE_ROWS = 100;

export interface StatusPageOptions {
  /** Seconds between the page's own refreshes; 0: none. */
  readonly refreshSeconds: number;
  /** The viewer role's token, as a bearer token or a basic-auth password; null: none asked (see openToViewers). */
  readonly token: string | null;
  /** The operator role's token (the actions); null or absent: the page is read-only. */
  readonly operatorToken?: string | null;
  /** Pages shown without a token (loopback, no viewer token). @default token === null */
  readonly openToViewers?: boolean;
  /** How the page judges triggerers alive (the triggerers' own health-check threshold). */
  readonly liveness: LivenessThresholds;
  /** Called once a response to a question is recorded (standalone wakes its own worker). */
  readonly onResponded?: () => void;
}

/**
 * The status page: what deferflow is doing, from the database alone (the serialized DAGs, never
 * DAG code), and, for an operator, the actions (action-pages.ts). Every list is paged or limited
 * in its query, so a page costs the same at 10 or 10,000 deferred task instances. Served next to
 * /metrics and /health (see ObservabilityServer); returns null for paths that are not its own.
 */
export function statusPages(database: Database, options: StatusPageOptions): (request: HttpRequest) => Promise<HttpReply | null> {
  const storage = openStores(database);
  const locks = livenessLocksOf(database);
  const access = new WebAccess(options);
  const notFound = (what: string): HttpReply => ({
    status: 404,
    headers: { 'content-type': 'text/html; charset=utf-8' },
    body: page('Not found', '', html`<h1>Not found</h1><p>${what}</p>`, 0),
  });

  // Values a task returned or an event carried are shown as its log lines are stored: with the
  // connections' secrets this process knows masked.
  const masker = SecretMasker.fromEnvironment();
  const inputs = new InputService(storage);
  const onResponded = options.onResponded ?? (() => {});
  // Their own permissions: a signed link needs no login; the API wants the operator token as a bearer.
  const input = inputRoutes(database, inputs, access, onResponded);
  const act = actionRoutes(database, storage, access, onResponded);

  return async (request) => {
    const answered = await input(request);
    if (answered) return answered;
    const url = new URL(request.url, 'http://deferflow.invalid');
    const segments = url.pathname
      .split('/')
      .filter((segment) => segment !== '')
      .map((segment) => decodeURIComponent(segment));
    const known =
      segments.length === 0 ||
      ['deferred', 'awaiting', 'triggers', 'daemons', 'triggerers', 'queues', 'charts', 'dags', 'ti', 'signals', 'audit', 'sign-in'].includes(segments[0]!);
    if (!known) return null;
    const visitor = access.visitorOf(request);
    if (visitor === null || (segments[0] === 'sign-in' && visitor.role !== 'operator')) {
      return {
        status: 401,
        headers: { 'content-type': 'text/plain', 'www-authenticate': 'Basic realm="deferflow", charset="UTF-8"' },
        body:
          segments[0] === 'sign-in'
            ? `signing in needs the operator token: as the password of basic auth (your name as the user name, recorded in the audit log)${access.actionsEnabled ? '' : '; none is set (DEFERFLOW_WEB_OPERATOR_TOKEN): the page is read-only'}\n`
            : 'the status page needs the web token: as a bearer token, or as the password of basic auth (any user name)\n',
      };
    }
    const forms = formsFor(access, visitor);
    const who =
      visitor.role === 'operator' ? html`operator <b>${visitor.name}</b>` : access.actionsEnabled ? html`viewer · <a href="/sign-in">sign in</a>` : '';
    const show = (title: string, here: string, content: Html, status = 200, refreshSeconds = 0): HttpReply => ({
      status,
      headers: { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' },
      body: page(title, here, content, refreshSeconds, who),
    });
    const acted = await act(request, visitor, segments, show);
    if (acted) return acted;
    if (request.method !== 'GET' && request.method !== 'HEAD')
      return { status: 405, headers: { allow: 'GET', 'content-type': 'text/plain' }, body: `${request.method} ${url.pathname}: GET only\n` };
    // Pages that list and watch refresh themselves; a page with a form to fill in does not.
    const notice = await doneNotice(storage, url.searchParams.get('done'));
    const view = (title: string, here: string, content: Html) => show(title, here, html`${notice}${content}`, 200, options.refreshSeconds);
    const after = optionalId(url.searchParams.get('after'));
    const [area, id, sub, subId] = segments;
    if (area === 'sign-in') return { status: 303, headers: { location: '/', 'cache-control': 'no-store' }, body: '' };
    if (area === undefined) return view('Overview', '/', await overview(storage, options, locks));
    if (area === 'deferred' && id === undefined) return view('Deferred task instances', '/deferred', await deferredPage(storage, after));
    if (area === 'awaiting' && id === undefined) return view('Awaiting input', '/awaiting', await awaitingPage(storage));
    if (area === 'ti' && id !== undefined && sub === 'input') {
      const content = await tiInputPage(inputs, Number(id), forms);
      return content ? show(`Question of task instance ${id}`, '/awaiting', content) : notFound(`Task instance ${id} asks no question.`);
    }
    if (area === 'triggers' && id === undefined) return view('Triggers', '/triggers', await triggersPage(storage, after));
    if (area === 'daemons' && id === undefined) return view('Daemons', '/daemons', await daemonsPage(storage, options, locks));
    if (area === 'triggerers' && id === undefined) return view('Triggerers', '/daemons', await daemonsPage(storage, options, locks, 'triggerer'));
    if (area === 'queues' && id === undefined) return view('Queues', '/queues', await queuesPage(storage, options, locks));
    if (area === 'charts' && id === undefined) return view('Charts', '/charts', await chartsPage(storage, url.searchParams.get('hours')));
    if (area === 'signals' && id !== undefined && sub === undefined) {
      const content = await signalKeyPage(storage, masker, id);
      return content ? view(`Signal ${id}`, '/signals', content) : notFound(`No signal was sent on ${id} (or all were pruned).`);
    }
    if (area === 'signals' && id === undefined) return show('Signals', '/signals', html`${notice}${await signalsPage(storage, forms)}`);
    if (area === 'audit' && id === undefined) return view('Audit log', '/audit', await auditPage(storage, optionalId(url.searchParams.get('before'))));
    if (area === 'dags' && id === undefined) return view('DAGs', '/dags', await dagsPage(storage));
    if (area === 'dags' && id !== undefined && sub === 'trigger' && subId === undefined) {
      const known = await storage.serializedDags.readSerializedDag(id);
      return known ? show(`Trigger ${id}`, '/dags', triggerForm(id, forms)) : notFound(`There is no DAG ${id} among the serialized DAGs.`);
    }
    if (area === 'dags' && id !== undefined && sub === undefined) {
      const content = await dagPage(storage, id, url.searchParams, forms);
      return content ? view(`DAG ${id}`, '/dags', content) : notFound(`There is no DAG ${id} among the serialized DAGs.`);
    }
    if (area === 'dags' && id !== undefined && sub === 'runs' && subId !== undefined && segments.length === 4) {
      const content = await runPage(storage, id, subId, forms, optionalId(url.searchParams.get('from')) ?? 0);
      return content ? view(`${id} ${subId}`, '/dags', content) : notFound(`DAG ${id} has no run ${subId}.`);
    }
    if (area === 'ti' && id !== undefined && sub === undefined) {
      const content = await taskInstancePage(storage, masker, Number(id), forms);
      return content ? view(`Task instance ${id}`, '/dags', content) : notFound(`There is no task instance ${id}.`);
    }
    if (area === 'ti' && id !== undefined && sub === 'log') {
      const content = await logPage(storage, Number(id), optionalId(url.searchParams.get('try')));
      return content ? view(`Log of task instance ${id}`, '/deferred', content) : notFound(`There is no task instance ${id}.`);
    }
    return notFound(`Nothing is served at ${url.pathname}.`);
  };
}

function optionalId(text: string | null): number | undefined {
  return text !== null && /^\d{1,15}$/.test(text) ? Number(text) : undefined;
}

const runLink = (dagId: string, runId: string) => html`<a href="${href(['dags', dagId, 'runs', runId])}">${runId}</a>`;
const dagLink = (dagId: string) => html`<a href="${href(['dags', dagId])}">${dagId}</a>`;
const logLink = (id: number, text: string | number = 'log') => html`<a href="${href(['ti', id, 'log'])}">${text}</a>`;

function pager(path: string, rows: readonly { id: number }[], after: number | undefined): Html {
  const next = rows.length === PAGE_ROWS ? html`<a href="${href([path], { after: rows.at(-1)!.id })}">next ${PAGE_ROWS} →</a>` : '';
  const first = after !== undefined ? html`<a href="${href([path])}">← first page</a>` : '';
  return html`<div class="pager">${first}${next}</div>`;
}

async function overview(storage: Stores, options: StatusPageOptions, locks: LivenessLocks): Promise<Html> {
  const now = Date.now();
  const [counts, triggers, running, dags, importErrors, coverage] = await Promise.all([
    storage.maintenance.countWaitingWork(),
    storage.triggers.countTriggers(),
    storage.jobs.listJobs({ runningOnly: true, limit: 1000 }),
    storage.serializedDags.listSerializedDags(),
    storage.serializedDags.listImportErrors(),
    readQueueCoverage(storage, locks, options.liveness, now),
  ]);
  const unserved = unservedWork(coverage);
  const liveness = await judgeJobs(running, options.liveness, now, locks);
  const alive = (kind: DaemonKind) => running.filter((job) => job.jobType === JOB_TYPES[kind] && liveness.get(job.id) === 'alive').length;
  // A process killed without ending its row says `running` until `db clean` prunes it: the
  // overview names the dead of the last day, the daemons page all of them.
  const dead = running.filter((job) => liveness.get(job.id) === 'dead' && job.latestHeartbeat !== null && now - job.latestHeartbeat < DEAD_DAEMON_NOTICE_MS);
  const card = (figure: number, what: string, link: string) => html`<a class="card" href="${link}"><b>${figure.toLocaleString('en')}</b>${what}</a>`;
  return html`<h1>Overview</h1><div class="cards">
${card(counts.deferredTaskInstances, 'deferred task instances', '/deferred')}
${card(counts.awaitingInput, 'awaiting input', '/awaiting')}
${card(triggers, 'triggers', '/triggers')}
${card(alive('triggerer'), 'live triggerers', '/daemons')}
${card(alive('worker'), 'live workers', '/daemons')}
${card(alive('scheduler'), 'live schedulers', '/daemons')}
${card(counts.dagRuns.running + counts.dagRuns.queued, 'unfinished DAG runs', '/dags')}
${card(dags.length, 'DAGs', '/dags')}
${card(importErrors.length, 'import errors', '/dags')}
</div>
${
  dead.length === 0
    ? ''
    : html`<div class="warning" id="dead-daemons"><b>Dead daemons</b> (<a href="/daemons">daemons</a>): what they held goes to live peers<ul>
${dead.map((job) => html`<li>${kindOf(job.jobType)} ${job.id} on ${job.hostname} (pid ${job.pid ?? '?'}): ${deathOf(job, options.liveness, now)}</li>`)}</ul></div>`
}
${
  unserved.length === 0
    ? ''
    : html`<div class="warning" id="unserved-queues"><b>Work that no live daemon serves</b> (<a href="/queues">queues</a>)<ul>
${unserved.map((work) => html`<li>${describeUnserved(work)}</li>`)}</ul></div>`
}
${
  importErrors.length === 0
    ? ''
    : html`<div class="warning" id="import-errors"><b>DAG files that fail to import</b> (<a href="/dags">DAGs</a>)<ul>
${importErrors.map((error) => html`<li><code>${error.fileloc}</code>: ${error.message.split('\n')[0]}</li>`)}</ul></div>`
}`;
}

async function queuesPage(storage: Stores, options: StatusPageOptions, locks: LivenessLocks): Promise<Html> {
  const coverage = await readQueueCoverage(storage, locks, options.liveness, Date.now());
  const unserved = unservedWork(coverage);
  const daemons = (ids: readonly number[]) => (ids.length === 0 ? html`<span class="muted">none</span>` : ids.join(', '));
  return html`<h1>Queues</h1>
<p class="muted">Work claimable now, by queue, and the live workers and triggerers serving each (started with --queues naming it; none given: default).</p>
${
  coverage.length === 0
    ? html`<p class="muted">No queue has work waiting or a live daemon serving it.</p>`
    : html`<table id="queues"><tr><th>queue</th><th>scheduled task instances</th><th>live workers</th><th>unclaimed triggers</th><th>live triggerers</th><th>served</th></tr>
${coverage.map((entry) => {
  const missing = unserved.filter((work) => work.queue === entry.queue);
  return html`<tr data-queue="${entry.queue}"><td><code>${entry.queue}</code></td><td class="num">${entry.scheduledTaskInstances}</td><td>${daemons(entry.liveWorkers)}</td>
<td class="num">${entry.unownedTriggers}</td><td>${daemons(entry.liveTriggerers)}</td>
<td>${missing.length === 0 ? html`<span class="state state-alive">yes</span>` : html`<span class="state state-dead">no ${missing.map((work) => (work.kind === 'task_instances' ? 'worker' : 'triggerer')).join(', no ')}</span>`}</td></tr>`;
})}</table>`
}`;
}

async function deferredPage(storage: Stores, after: number | undefined): Promise<Html> {
  const now = Date.now();
  const [rows, counts] = await Promise.all([
    storage.taskInstances.listDeferredTaskInstances({ limit: PAGE_ROWS, afterId: after }),
    storage.maintenance.countWaitingWork(),
  ]);
  return html`<h1>Deferred task instances <span class="muted">(${counts.deferredTaskInstances.toLocaleString('en')})</span></h1>
${
  rows.length === 0
    ? html`<p class="muted">No task instance is deferred${after !== undefined ? ' past this point' : ''}.</p>`
    : html`
<table id="deferred"><tr><th>task instance</th><th>DAG</th><th>task</th><th>run</th><th>waits on</th><th>triggerer</th><th>since</th><th>timeout in</th><th>resumes at</th></tr>
${rows.map(
  (
    ti,
  ) => html`<tr data-ti="${ti.id}"><td class="num">${logLink(ti.id, ti.id)}</td><td>${dagLink(ti.dagId)}</td><td>${ti.taskId}</td><td>${runLink(ti.dagId, ti.runId)}</td>
<td>${ti.triggerId === null ? html`<span class="muted">no trigger</span>` : html`trigger ${ti.triggerId} <code>${ti.classpath ?? '?'}</code>`}</td>
<td>${ti.triggererId === null ? html`<span class="muted">unowned</span>` : ti.triggererId}</td>
<td title="${isoMoment(ti.waitingSince)}">${ti.waitingSince === null ? '' : ago(now - ti.waitingSince)}</td>
<td title="${isoMoment(ti.timeoutAt)}">${ti.timeoutAt === null ? html`<span class="muted">none</span>` : ago(ti.timeoutAt - now)}</td><td><code>${ti.nextMethod ?? ''}</code></td></tr>`,
)}</table>`
}
${pager('deferred', rows, after)}`;
}

async function awaitingPage(storage: Stores): Promise<Html> {
  const now = Date.now();
  const rows = await storage.inputs.listAwaitingInput(PAGE_ROWS);
  return html`<h1>Awaiting input</h1>
${
  rows.length === 0
    ? html`<p class="muted">No task instance awaits input.</p>`
    : html`
<table id="awaiting"><tr><th>task instance</th><th>DAG</th><th>task</th><th>run</th><th>question</th><th>asked</th><th>timeout in</th></tr>
${rows.map(
  (
    ti,
  ) => html`<tr data-ti="${ti.id}"><td class="num">${logLink(ti.id, ti.id)}</td><td>${dagLink(ti.dagId)}</td><td>${ti.taskId}</td><td>${runLink(ti.dagId, ti.runId)}</td>
<td><a href="${href(['ti', ti.id, 'input'])}">${ti.subject}</a></td><td>${ago(now - ti.askedAt)} ago</td>
<td title="${isoMoment(ti.timeoutAt)}">${ti.timeoutAt === null ? html`<span class="muted">none</span>` : ago(ti.timeoutAt - now)}</td></tr>`,
)}</table>`
}`;
}

/** A task instance's question, with the form that answers it for an operator (posting to /ti/<id>/input: action-pages.ts). */
async function tiInputPage(inputs: InputService, id: number, forms: OperatorForms | null): Promise<Html | null> {
  if (!Number.isSafeInteger(id)) return null;
  const input = await inputs.question(id);
  if (!input) return null;
  const asking = input.currentTry === input.tryNumber && (input.state === 'awaiting_input' || input.state === 'running');
  if (!asking && !input.response)
    return html`<h1>${input.question.subject}</h1><p class="muted">No longer asked: the task instance is ${input.state ?? 'in no state'}.</p>`;
  if (forms === null || input.response) return html`${questionPage(input, null, null)}${input.response ? '' : needsOperator()}`;
  return questionPage(input, { action: href(['ti', id, 'input']), hidden: forms.hidden(), askName: false }, null);
}

async function triggersPage(storage: Stores, after: number | undefined): Promise<Html> {
  const now = Date.now();
  const rows = await storage.triggers.listTriggers({ limit: PAGE_ROWS, afterId: after, perTrigger: 5 });
  return html`<h1>Triggers</h1>
${
  rows.length === 0
    ? html`<p class="muted">No trigger.</p>`
    : html`
<table id="triggers"><tr><th>trigger</th><th>classpath</th><th>triggerer</th><th>age</th><th>task instances waiting</th></tr>
${rows.map(
  (trigger) => html`<tr data-trigger="${trigger.id}"><td class="num">${trigger.id}</td><td><code>${trigger.classpath}</code></td>
<td>${trigger.triggererId === null ? html`<span class="muted">unowned</span>` : `${trigger.triggererId} (${trigger.triggererHost ?? '?'})`}</td>
<td>${ago(now - trigger.createdAt)}</td>
<td>${trigger.taskInstanceCount}: ${trigger.taskInstances.map((ti, i) => html`${i > 0 ? ', ' : ''}${logLink(ti.id, `${ti.dagId}.${ti.taskId}`)}`)}${trigger.taskInstanceCount > trigger.taskInstances.length ? ' …' : ''}${trigger.memberOf.length > 0 ? `; member of composite ${trigger.memberOf.join(', ')}` : ''}</td></tr>`,
)}</table>`
}
${pager('triggers', rows, after)}`;
}

type DaemonKind = keyof typeof JOB_TYPES;

/** How long the overview names a dead daemon whose row was never ended (its last heartbeat's age). */
const DEAD_DAEMON_NOTICE_MS = 24 * 3600_000;

const kindOf = (jobType: string): string => (Object.keys(JOB_TYPES) as DaemonKind[]).find((kind) => JOB_TYPES[kind] === jobType) ?? jobType;

/** Why a job judged dead is: its process gone (its liveness lock let go) or, alive perhaps, no heartbeat within the threshold. */
function deathOf(job: JobListing, thresholds: LivenessThresholds, now: number): string {
  const thresholdMs = job.jobType === JOB_TYPES.triggerer ? thresholds.triggererMs : thresholds.workerMs;
  const age = job.latestHeartbeat === null ? null : now - job.latestHeartbeat;
  if (age !== null && age <= thresholdMs) return `process gone (its liveness lock was let go), last heartbeat ${ago(age)} ago`;
  return `no heartbeat for ${age === null ? 'ever' : ago(age)} (threshold ${ago(thresholdMs)})`;
}

const thresholdsText = ({ triggererMs, workerMs }: LivenessThresholds): string =>
  triggererMs === workerMs ? ago(triggererMs) : `${ago(triggererMs)} (triggerers) or ${ago(workerMs)} (workers, schedulers)`;

/**
 * Every daemon that ran on this database (or only one kind), judged as they judge each other:
 * the live first, then the dead, then those that ended; each with what it holds against what it
 * can hold (a triggerer's triggers and capacity, a worker's task instances and slots).
 */
async function daemonsPage(storage: Stores, options: StatusPageOptions, locks: LivenessLocks, kind?: DaemonKind): Promise<Html> {
  const now = Date.now();
  const jobs = await storage.jobs.listJobs({ jobType: kind === undefined ? undefined : JOB_TYPES[kind], limit: PAGE_ROWS });
  const judged = await judgeJobs(jobs, options.liveness, now, locks);
  const ids = (type: string) => jobs.filter((job) => job.jobType === type).map((job) => job.id);
  const [triggers, taskInstances] = await Promise.all([
    storage.triggers.ownedTriggerCounts(ids(JOB_TYPES.triggerer)),
    storage.taskInstances.heldTaskInstanceCounts(ids(JOB_TYPES.worker)),
  ]);
  const order: Record<string, number> = { alive: 0, dead: 1, ended: 2 };
  const listed = [...jobs].sort((a, b) => order[judged.get(a.id)!]! - order[judged.get(b.id)!]! || b.id - a.id);
  const holds = (job: JobListing) =>
    job.jobType === JOB_TYPES.triggerer
      ? { count: triggers.get(job.id) ?? 0, what: 'triggers' }
      : job.jobType === JOB_TYPES.worker
        ? { count: taskInstances.get(job.id) ?? 0, what: 'task instances' }
        : null;
  return html`<h1>${kind === undefined ? 'Daemons' : 'Triggerers'}</h1>
<p class="muted">Judged as the daemons judge each other: a process whose liveness lock is let go is dead at once (killed, or cut off from the database); one that holds it but does no work, once its heartbeat is older than ${thresholdsText(options.liveness)}. A dead one's work goes to live peers.</p>
${
  listed.length === 0
    ? html`<p class="muted">No ${kind ?? 'daemon'} has run on this database.</p>`
    : html`
<table id="daemons"><tr><th>kind</th><th>job</th><th>host</th><th>pid</th><th>queues</th><th>state</th><th>last heartbeat</th><th>started</th><th>holds</th><th>of</th><th>load</th></tr>
${listed.map((job) => {
  const liveness = judged.get(job.id)!;
  const held = holds(job);
  return html`<tr data-job="${job.id}" data-kind="${kindOf(job.jobType)}" data-liveness="${liveness}"><td>${kindOf(job.jobType)}</td><td class="num">${job.id}</td><td>${job.hostname}</td><td class="num">${job.pid ?? ''}</td>
<td>${job.jobType === JOB_TYPES.scheduler ? '' : (job.queues ?? 'default')}</td>
<td>${stateBadge(liveness)}${liveness === 'dead' ? html` <span class="muted">${deathOf(job, options.liveness, now)}</span>` : ''}</td>
<td>${job.latestHeartbeat === null ? '' : `${ago(now - job.latestHeartbeat)} ago`}</td><td>${ago(now - job.startDate)} ago</td>
<td class="num">${held === null ? '' : `${held.count} ${held.what}`}</td><td class="num">${job.capacity ?? ''}</td>
<td class="num">${held !== null && job.capacity ? `${Math.round((100 * held.count) / job.capacity)} %` : ''}</td></tr>`;
})}</table>`
}`;
}

/** A DAG's serialized JSON, read as the page needs it (never DAG code). */
function dagOf(dagId: string, dataJson: string) {
  const data = JSON.parse(dataJson) as {
    dag: {
      description?: string | null;
      schedule: StoredSchedule | null;
      tasks: {
        task_id: string;
        operator: string;
        upstream_task_ids: string[];
        trigger_rule: string;
        retries: number;
        start_trigger: null | { classpath: string };
        signals?: { key: string; action: string }[];
      }[];
    };
  };
  const scheduleText = describeSchedule(data.dag.schedule) ?? 'none (triggered only)';
  return { dagId, description: data.dag.description ?? null, scheduleText, tasks: data.dag.tasks };
}

async function dagsPage(storage: Stores): Promise<Html> {
  const [dags, importErrors] = await Promise.all([storage.serializedDags.listSerializedDags(), storage.serializedDags.listImportErrors()]);
  const latest = await Promise.all(dags.map((dag) => storage.dagRuns.listDagRuns({ dagId: dag.dagId, limit: 1 })));
  return html`<h1>DAGs</h1>
${
  dags.length === 0
    ? html`<p class="muted">No DAG has been processed.</p>`
    : html`
<table id="dags"><tr><th>DAG</th><th>schedule</th><th>tasks</th><th>latest run</th><th>file</th></tr>
${dags.map((row, i) => {
  const dag = dagOf(row.dagId, row.dataJson);
  const run = latest[i]![0];
  return html`<tr data-dag="${dag.dagId}"><td>${dagLink(dag.dagId)}</td><td>${dag.scheduleText}${row.paused ? html` <span class="state state-skipped">paused</span>` : ''}</td><td class="num">${dag.tasks.length}</td>
<td>${run ? html`${runLink(dag.dagId, run.runId)} ${stateBadge(run.state)}` : html`<span class="muted">none</span>`}</td><td class="muted">${row.fileloc}</td></tr>`;
})}</table>`
}
<h2>Import errors</h2>
${importErrors.length === 0 ? html`<p class="muted">None.</p>` : html`<table id="import-errors"><tr><th>file</th><th>error</th></tr>${importErrors.map((error) => html`<tr><td>${error.fileloc}</td><td><pre>${error.message}</pre></td></tr>`)}</table>`}`;
}

/** Runs the DAG page shows (in its grid and its list). */
const DAG_PAGE_RUNS = 25;

async function dagPage(storage: Stores, dagId: string, query: URLSearchParams, forms: OperatorForms | null): Promise<Html | null> {
  const stored = await storage.serializedDags.readSerializedDag(dagId);
  if (!stored) return null;
  const dag = dagOf(dagId, stored.data);
  const scheduler = toSchedulerDag(dagId, stored.data, stored.hash);
  const nextAt = scheduler.schedule ? nextDueAt(scheduler.schedule, await storage.dagRuns.latestScheduledLogicalDate(dagId)) : null;
  const filter = runFilterOf(query);
  const [runs, watchers] = await Promise.all([
    storage.dagRuns.listDagRuns({ dagId, limit: DAG_PAGE_RUNS, state: filter.state, since: filter.since }),
    storage.serializedDags.listDagWatchers(dagId),
  ]);
  const cells = await storage.taskInstances.taskInstanceGrid(
    dagId,
    runs.map((run) => run.runId),
  );
  const downstream = (taskId: string) => dag.tasks.filter((task) => task.upstream_task_ids.includes(taskId)).map((task) => task.task_id);
  return html`<h1>DAG ${dagId}${stored.paused ? html` <span class="state state-paused" id="paused">paused</span>` : ''}</h1>
${
  forms === null
    ? ''
    : html`<div class="actions"><a href="${href(['dags', dagId, 'trigger'])}" id="trigger-run">Trigger a run…</a>
${stored.paused ? forms.button(href(['dags', dagId, 'unpause']), 'Unpause', {}, 'unpause') : forms.button(href(['dags', dagId, 'pause']), 'Pause', {}, 'pause')}</div>`
}
${dag.description ? html`<p>${dag.description}</p>` : ''}
<p>Schedule: <b>${dag.scheduleText}</b>${nextAt !== null ? html` · next run created at <b>${isoMoment(nextAt)}</b>` : ''} · file <span class="muted">${stored.fileloc}</span></p>
<h2>Tasks</h2>
<table id="tasks"><tr><th>task</th><th>operator</th><th>upstream</th><th>downstream</th><th>trigger rule</th><th>retries</th><th>starts from</th><th>signals</th></tr>
${dag.tasks.map(
  (task) => html`<tr data-task="${task.task_id}"><td>${task.task_id}</td><td><code>${task.operator}</code></td><td>${task.upstream_task_ids.join(', ')}</td>
<td>${downstream(task.task_id).join(', ')}</td><td>${task.trigger_rule}</td><td class="num">${task.retries}</td><td>${task.start_trigger ? html`<code>${task.start_trigger.classpath}</code>` : ''}</td>
<td>${(task.signals ?? []).map((signal, i) => html`${i > 0 ? ', ' : ''}${signal.action} on <code>${signal.key}</code>`)}</td></tr>`,
)}</table>
${
  watchers.length === 0
    ? ''
    : html`<h2>Watchers</h2>
<table id="watchers"><tr><th>trigger</th><th>classpath</th><th>queue</th><th>triggerer</th><th>cursor</th><th>last event</th><th>events taken</th></tr>
${watchers.map(
  (
    watcher,
  ) => html`<tr data-trigger="${watcher.triggerId}"><td class="num">${watcher.triggerId}</td><td><code>${watcher.classpath}</code></td><td>${watcher.queue}</td>
<td>${watcher.triggererId === null ? html`<span class="muted">unclaimed</span>` : watcher.triggererId}</td><td><code>${watcher.cursor ?? ''}</code></td>
<td title="${isoMoment(watcher.lastEventAt)}">${watcher.lastEventAt === null ? html`<span class="muted">none yet</span>` : ago(Date.now() - watcher.lastEventAt)}</td>
<td class="event-filters">${watcher.eventFilters === null ? 'all' : watcher.eventFilters.map((filter, i) => html`${i > 0 ? ' or ' : ''}<code>${JSON.stringify(filter)}</code>`)}</td></tr>`,
)}</table>`
}
<h2>Grid</h2>
${gridOf(
  dagId,
  dag.tasks.map((task) => task.task_id),
  runs,
  cells,
  filter,
)}
<h2>Runs</h2>
${
  runs.length === 0
    ? html`<p class="muted">${filter.active ? 'No run matches the filter.' : 'No run yet.'}</p>`
    : html`<table id="runs"><tr><th>run</th><th>type</th><th>state</th><th>logical date</th><th>started</th><th>ended</th></tr>
${runs.map(
  (run) => html`<tr><td>${runLink(dagId, run.runId)}</td><td>${run.runType}</td><td>${stateBadge(run.state)}</td><td>${isoMoment(run.logicalDate)}</td>
<td>${isoMoment(run.startDate)}</td><td>${isoMoment(run.endDate)}</td></tr>`,
)}</table>`
}`;
}

/** The DAG page's run filter, from its query (`?state=failed&since=2026-11-01`); what it could not read, named. */
function runFilterOf(query: URLSearchParams): { state?: DagRunState; since?: number; sinceText: string; active: boolean; problems: string[] } {
  const problems: string[] = [];
  const stateText = query.get('state') ?? '';
  const sinceText = query.get('since') ?? '';
  const state = (DAG_RUN_STATES as readonly string[]).includes(stateText) ? (stateText as DagRunState) : undefined;
  if (stateText !== '' && state === undefined)
    problems.push(`state ${JSON.stringify(stateText)} is not a run state (${DAG_RUN_STATES.join(', ')}): not filtered by state`);
  const since = /^\d{4}-\d{2}-\d{2}$/.test(sinceText) ? Date.parse(`${sinceText}T00:00:00Z`) : Number.NaN;
  if (sinceText !== '' && Number.isNaN(since)) problems.push(`since ${JSON.stringify(sinceText)} is not a date (YYYY-MM-DD): not filtered by date`);
  return {
    ...(state === undefined ? {} : { state }),
    ...(Number.isNaN(since) ? {} : { since }),
    sinceText: Number.isNaN(since) ? '' : sinceText,
    active: state !== undefined || !Number.isNaN(since),
    problems,
  };
}

/**
 * A DAG's recent runs × its tasks, oldest run on the left: each cell a task instance's state
 * (several for a mapped task), opening its page (its log a click away); a form filters the runs.
 */
function gridOf(
  dagId: string,
  taskIds: readonly string[],
  runs: readonly DagRunRow[],
  cells: readonly GridCell[],
  filter: ReturnType<typeof runFilterOf>,
): Html {
  const byKey = groupBy(cells, (cell) => `${cell.runId}\0${cell.taskId}`);
  const columns = [...runs].reverse();
  const form = html`<form id="grid-filter" method="get" class="filter">runs in state <select name="state"><option value="">any</option>${DAG_RUN_STATES.map(
    (state) => html`<option value="${state}"${new Html(filter.state === state ? ' selected' : '')}>${state}</option>`,
  )}</select> from <input type="date" name="since" value="${filter.sinceText}"> <button type="submit">Filter</button>${
    filter.active ? html` <a href="${href(['dags', dagId])}">clear</a>` : ''
  }</form>${filter.problems.map((problem) => html`<p class="warning">${problem}</p>`)}`;
  if (columns.length === 0) return form;
  return html`${form}<div class="grid-wrap"><table id="grid" class="grid"><tr><th>task</th>${columns.map(
    (run) =>
      html`<th data-run="${run.runId}" title="${run.runId} · ${run.state}"><a href="${href(['dags', dagId, 'runs', run.runId])}" class="cell state-${run.state}"></a></th>`,
  )}</tr>
${taskIds.map(
  (taskId) =>
    html`<tr data-task="${taskId}"><th>${taskId}</th>${columns.map((run) => {
      const found = byKey.get(`${run.runId}\0${taskId}`) ?? [];
      return html`<td data-run="${run.runId}">${found.map(
        (cell) =>
          html`<a class="cell state-${cell.state ?? 'none'}" data-state="${cell.state ?? 'none'}" href="${href(['ti', cell.id])}" title="${taskId}${cell.mapIndex >= 0 ? ` [${cell.mapIndex}]` : ''} · ${run.runId} · ${cell.state ?? 'none'} · try ${cell.tryNumber}"></a>`,
      )}</td>`;
    })}</tr>`,
)}</table></div>`;
}

/**
 * A run's timeline: a row per task instance, a bar per state it was in (its try, and the trigger it
 * waited on, in the bar's title), placed on one time axis; under it, the worker-slot time the
 * tasks held against the time they waited without a slot.
 */
function timelineOf(
  tis: readonly { id: number; taskId: string; mapIndex: number }[],
  shown: { readonly from: number; readonly to: number },
  changes: readonly StateChange[],
  now: number,
): Html {
  // Grouped once (a run may have thousands of task instances), in the order listStateChanges gave.
  const changesOf = groupBy(changes, (change) => change.taskInstanceId);
  const byTask = tis.map((ti) => ({ ti, spans: stateSpans(changesOf.get(ti.id) ?? [], now) }));
  // The axis and the slot time are the whole run's; the rows, the page's.
  const all = byTask.flatMap((row) => row.spans);
  if (all.length === 0) return html`<p class="muted">No state changes recorded for this run.</p>`;
  let start = Number.POSITIVE_INFINITY;
  let end = Number.NEGATIVE_INFINITY;
  for (const span of all) {
    start = Math.min(start, span.from);
    end = Math.max(end, span.to);
  }
  const width = Math.max(1, end - start);
  const percent = (ms: number) => `${((100 * ms) / width).toFixed(3)}%`;
  const { holdingMs, waitingMs } = slotTime(all);
  const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
  return html`<h2>Timeline</h2>
<div id="timeline" class="timeline"><div class="tl-axis"><span>${isoMoment(start)}</span><span>${seconds(width)}</span></div>
${byTask
  .slice(shown.from, shown.to)
  .map(
    ({ ti, spans }) =>
      html`<div class="tl-row" data-task="${ti.taskId}"><a class="tl-label" href="${href(['ti', ti.id])}">${taskLabel(ti)}</a><span class="tl-track">${spans.map(
        (span) =>
          html`<span class="tl-bar state-${span.state ?? 'none'}" data-state="${span.state ?? 'none'}" style="left:${percent(span.from - start)};width:${percent(span.to - span.from)}" title="${span.state ?? 'none'} ${seconds(span.to - span.from)} · try ${span.tryNumber}${span.triggerId === null ? '' : ` · trigger ${span.triggerId}`}"></span>`,
      )}</span></div>`,
  )}
<div class="tl-legend">${[...new Set(all.map((span) => span.state ?? 'none'))].map((state) => html`<span><span class="cell state-${state}"></span> ${state}</span>`)}</div></div>
<p id="slot-time">Worker slots held <b>${seconds(holdingMs)}</b> (queued and running); waited <b>${seconds(waitingMs)}</b> without one (deferred, up for reschedule or retry, awaiting input)${
    tis.length > shown.to - shown.from ? `, all ${tis.length} task instances together` : ''
  }.</p>
<h2>Task instances</h2>`;
}

/** A task instance as a run's page names it: its task, and its map index when mapped. */
const taskLabel = (ti: { taskId: string; mapIndex: number }) => (ti.mapIndex < 0 ? ti.taskId : `${ti.taskId} [${ti.mapIndex}]`);

/**
 * A run: its timeline and its task instances, PAGE_ROWS at a time from `from` (a run of a task
 * mapped over thousands of items stays a page a browser draws at once), under a count of the whole
 * run's task instances by state; the timeline's axis and slot time are the whole run's.
 */
async function runPage(storage: Stores, dagId: string, runId: string, forms: OperatorForms | null, from: number): Promise<Html | null> {
  const run = await storage.dagRuns.findDagRun(dagId, runId);
  if (!run) return null;
  const tis = await storage.taskInstances.taskInstancesOfRunId(runId, dagId);
  const changes = await storage.taskInstances.listStateChanges(tis.map((ti) => ti.id));
  const start = from < tis.length ? from : 0;
  const shown = { from: start, to: Math.min(tis.length, start + PAGE_ROWS) };
  const counts = [...groupBy(tis, (ti) => ti.state ?? 'none')].map(([state, ofState]) => html`${ofState.length} ${stateBadge(state)}`);
  const at = (position: number) => href(['dags', dagId, 'runs', runId], position === 0 ? {} : { from: position });
  const pages =
    tis.length <= PAGE_ROWS
      ? ''
      : html`<div class="pager" id="run-pager">task instances ${shown.from + 1}–${shown.to} of ${tis.length} ${
          shown.from > 0 ? html`<a href="${at(Math.max(0, shown.from - PAGE_ROWS))}">← previous ${PAGE_ROWS}</a>` : ''
        }${shown.to < tis.length ? html`<a href="${at(shown.to)}">next ${Math.min(PAGE_ROWS, tis.length - shown.to)} →</a>` : ''}</div>`;
  return html`<h1>${dagLink(dagId)} run ${runId} ${stateBadge(run.state)}</h1>
${forms === null ? '' : html`<div class="actions">${forms.button(href(['dags', dagId, 'runs', runId, 'clear']), 'Clear the run…', {}, 'clear-run')}</div>`}
<p id="run-summary">${tis.length} task instance${tis.length === 1 ? '' : 's'}${tis.length === 0 ? '' : html`: ${counts.map((count, i) => html`${i === 0 ? '' : ', '}${count}`)}`}</p>
${pages}
${timelineOf(tis, shown, changes, Date.now())}
<table id="task-instances"><tr><th>task</th><th>state</th><th>try</th><th>host</th><th>started</th><th>ended</th><th>log</th></tr>
${tis.slice(shown.from, shown.to).map(
  (
    ti,
  ) => html`<tr data-task="${ti.taskId}"${ti.mapIndex < 0 ? '' : html` data-map-index="${ti.mapIndex}"`}><td><a href="${href(['ti', ti.id])}">${taskLabel(ti)}</a></td><td>${stateBadge(ti.state)}</td><td class="num">${ti.tryNumber}</td><td>${ti.hostname ?? ''}</td>
<td>${isoMoment(ti.startDate)}</td><td>${isoMoment(ti.endDate)}</td><td>${logLink(ti.id)}</td></tr>`,
)}</table>
${pages}`;
}

async function logPage(storage: Stores, id: number, tryAsked: number | undefined): Promise<Html | null> {
  if (!Number.isSafeInteger(id)) return null;
  const ti = await storage.taskInstances.readTaskInstance({ id });
  if (!ti) return null;
  const tries = await storage.logs.taskLogTries(id);
  const tryNumber = tryAsked ?? Math.max(ti.try_number, ...tries);
  const lines = await storage.logs.readTaskLog(id, tryNumber);
  // As `deferflow tasks logs` prints them: the fields as JSON, a stack indented below.
  const line = (entry: StoredLogLine) => {
    const { traceback, ...rest } = entry.fieldsJson === null ? {} : (JSON.parse(entry.fieldsJson) as Record<string, unknown>);
    const fields = Object.keys(rest).length === 0 ? '' : ` ${JSON.stringify(rest)}`;
    const stack = typeof traceback === 'string' ? `\n${traceback.replace(/^/gm, '    ')}` : '';
    const from = entry.triggerId === null ? '' : `[trigger ${entry.triggerId}] `;
    const level = entry.level === 'warn' || entry.level === 'error' || entry.level === 'fatal' ? entry.level : '';
    return html`<span class="${[entry.triggerId === null ? '' : 'trigger', level].join(' ').trim()}">${isoMoment(entry.loggedAt)} ${entry.level.toUpperCase().padEnd(5)} ${from}${entry.message}${fields}${stack}</span>\n`;
  };
  return html`<h1>${dagLink(ti.dag_id)} · ${runLink(ti.dag_id, ti.run_id)} · <a href="${href(['ti', id])}">${ti.task_id}</a> ${stateBadge(ti.state)}</h1>
<p>Tries: ${tries.length === 0 ? html`<span class="muted">none logged yet</span>` : tries.map((n) => html`<a href="${href(['ti', id, 'log'], { try: n })}">${n === tryNumber ? html`<b>${n}</b>` : n}</a> `)}</p>
${lines.length === 0 ? html`<p class="muted">No log lines for try ${tryNumber} yet.</p>` : html`<pre class="log" id="log">${lines.map(line)}</pre>`}`;
}

/**
 * One task instance: where it stands, what it returned, the event its trigger delivered, its last
 * try's error (the stack with the user's frames first) and its reschedules; values masked as its
 * log lines are.
 */
async function taskInstancePage(storage: Stores, masker: SecretMasker, id: number, forms: OperatorForms | null): Promise<Html | null> {
  if (!Number.isSafeInteger(id)) return null;
  const ti = await storage.taskInstances.readTaskInstance({ id });
  if (!ti) return null;
  const [errors, reschedules] = await Promise.all([
    storage.taskInstances.tryErrors([{ id, tryNumber: ti.try_number }]),
    storage.taskInstances.taskReschedules(id, null),
  ]);
  const error = ti.state === 'failed' || ti.state === 'up_for_retry' ? errors.get(id) : undefined;
  const opened = ti.next_event === null ? null : storage.taskInstances.openNextKwargs(id, null, ti.next_event);
  const shown = (json: string) => masker.mask(JSON.stringify(JSON.parse(json), null, 2));
  const moment = (value: Date | string | null) => isoMoment(fromDbTime(value));
  const fact = (name: string, value: Html | string | number | null) => html`<tr><th>${name}</th><td>${value ?? ''}</td></tr>`;
  return html`<h1>${dagLink(ti.dag_id)} · ${runLink(ti.dag_id, ti.run_id)} · ${ti.task_id} ${stateBadge(ti.state)}</h1>
${
  forms === null
    ? ''
    : html`<div class="actions">${forms.button(href(['ti', id, 'clear']), 'Clear…', { downstream: 'no' }, 'clear')}${forms.button(href(['ti', id, 'clear']), 'Clear with downstream…', { downstream: 'yes' }, 'clear-downstream')}
${forms.button(href(['ti', id, 'mark']), 'Mark success…', { state: 'success' }, 'mark-success')}${forms.button(href(['ti', id, 'mark']), 'Mark failed…', { state: 'failed' }, 'mark-failed')}</div>`
}
<table id="ti-facts" class="facts">
${fact('try', `${ti.try_number} of ${ti.max_tries + 1}`)}
${fact('operator', ti.operator)}
${fact('queue', ti.queue)}
${fact('host', ti.hostname === null ? null : `${ti.hostname} (pid ${ti.pid ?? '?'}${ti.worker_job_id === null ? '' : `, worker job ${ti.worker_job_id}`})`)}
${fact('started', moment(ti.start_date))}
${fact('ended', moment(ti.end_date))}
${ti.trigger_id === null ? '' : fact('waits on', html`trigger ${ti.trigger_id}, resumes at <code>${ti.next_method ?? ''}</code>`)}
${fact('log', logLink(id))}
</table>
<h2>Returned</h2>
${ti.return_value === null ? html`<p class="muted">Nothing returned.</p>` : html`<pre id="return-value">${shown(ti.return_value)}</pre>`}
${
  opened === null
    ? ''
    : html`<h2>Event</h2><p class="muted">What its trigger delivered${ti.next_method === null ? ', resuming it' : html`, for <code>${ti.next_method}</code>`}.</p>
${opened.json === null ? html`<p class="muted">Encrypted, and this process has not the key to open it.</p>` : html`<pre id="event">${shown(JSON.stringify((JSON.parse(opened.json) as { event?: unknown }).event ?? null))}</pre>`}`
}
${
  error === undefined
    ? ''
    : html`<h2>Error of try ${ti.try_number}</h2>
<p id="error-message">${error.code === null ? '' : html`<code>${error.code}</code> `}${masker.mask(error.error)}</p>
${error.traceback === null ? '' : stackOf(masker.mask(error.traceback))}`
}
${
  reschedules.length === 0
    ? ''
    : html`<h2>Reschedules</h2><table id="reschedules"><tr><th>try</th><th>poked</th><th>until</th><th>next poke</th></tr>
${reschedules.map((r) => html`<tr><td class="num">${r.tryNumber}</td><td>${isoMoment(r.startDate)}</td><td>${isoMoment(r.endDate)}</td><td>${isoMoment(r.rescheduleDate)}</td></tr>`)}</table>`
}`;
}

/**
 * Where deferflow itself runs from: its frames in a stack are not the user's. Three folders up
 * from the sources' src/app/web/ and from the build's dist/src/bundle/ (scripts/build.ts).
 */
const PACKAGE_ROOT = fileURLToPath(new URL('../../../', import.meta.url));

/**
 * A stack with the user's own frames first: the message, the frames of the user's code, then the
 * frames of Node, dependencies and deferflow (folded).
 */
function stackOf(traceback: string): Html {
  const lines = traceback.split('\n');
  const firstFrame = lines.findIndex((line) => /^\s+at /.test(line));
  const head = firstFrame === -1 ? lines : lines.slice(0, firstFrame);
  const frames = firstFrame === -1 ? [] : lines.slice(firstFrame);
  const internal = (frame: string) => frame.includes('node:') || frame.includes('/node_modules/') || frame.includes(PACKAGE_ROOT) || !/[/\\]/.test(frame);
  const own = frames.filter((frame) => !internal(frame));
  const others = frames.filter(internal);
  return html`<pre id="error-stack">${head.join('\n')}${own.length === 0 ? '' : `\n${own.join('\n')}`}</pre>
${others.length === 0 ? '' : html`<details><summary>${others.length} frames of Node, dependencies and deferflow</summary><pre>${others.join('\n')}</pre></details>`}`;
}
