import type { Database } from '../../database/connect.ts';
import { formChoices } from './input-pages.ts';
import type { HttpReply, HttpRequest } from '../../services/observability/http-server.ts';
import { OperatorActions } from '../../services/operator-actions.ts';
import type { AuditRecord, Stores } from '../../storage/index.ts';
import { DeferflowError, NotJsonError } from '../../vocabulary/errors.ts';
import { assertJsonObject, type JsonObject, type JsonValue } from '../../vocabulary/serialization/json.ts';
import { CSRF_FIELD, type Visitor, type WebAccess } from './access.ts';
import { Html, href, html, isoMoment } from './html.ts';
import { ago } from '../../vocabulary/time/readable-duration.ts';
import type { SecretMasker } from '../../services/logs/secret-masker.ts';

/*
 * The status page's actions (issue 46), each a form posted to the page it acts on:
 *
 *   POST /dags/<dag>/trigger        conf (JSON object), run_id        → the run's page
 *   POST /dags/<dag>/pause | unpause                                   → the DAG's page
 *   POST /dags/<dag>/runs/<run>/clear                 (confirmed)      → the run's page
 *   POST /ti/<id>/clear             downstream        (confirmed)      → the run's page
 *   POST /ti/<id>/mark              state             (confirmed)      → the task instance's page
 *   POST /ti/<id>/input             the question's fields, choose      → the task instance's page
 *   POST /signals                   key, value (JSON)                  → the signals page
 *
 * Each needs the operator role and the form's CSRF token (access.ts), and goes through
 * OperatorActions, the same code as the CLI's commands, which writes the audit log. A
 * destructive one (clear, mark) first answers a page saying what it will do, with a form to
 * confirm. Done, it redirects (303) to the page it names with `?done=<audit entry id>`, which
 * that page shows as a notice; refused, it answers 403 (no role, no CSRF token) or 400 (the
 * action's own refusal, with its code) on a page of its own; nothing is changed either way.
 */

/** Reads the forms an operator's page carries; null for a viewer (no forms shown). */
export class OperatorForms {
  constructor(private readonly csrf: string) {}

  /** A form of one button posting `fields` to `action`. */
  button(action: string, label: string, fields: Record<string, string> = {}, id?: string): Html {
    return html`<form class="action" method="post" action="${action}"${new Html(id ? ` id="${id}"` : '')}>${this.hidden(fields)}<button type="submit">${label}</button></form>`;
  }

  /** The hidden fields of a form: `fields` and the CSRF token. */
  hidden(fields: Record<string, string> = {}): Html {
    return html`${Object.entries(fields).map(([name, value]) => html`<input type="hidden" name="${name}" value="${value}">`)}<input type="hidden" name="${CSRF_FIELD}" value="${this.csrf}">`;
  }
}

/** The forms a visitor sees: an operator's, or none. */
export function formsFor(access: WebAccess, visitor: Visitor): OperatorForms | null {
  return visitor.role === 'operator' && access.csrfToken !== null ? new OperatorForms(access.csrfToken) : null;
}

type Show = (title: string, here: string, content: Html, status?: number) => HttpReply;

/** Answers the action posts; null for other requests. */
export function actionRoutes(
  database: Database,
  storage: Stores,
  access: WebAccess,
  onResponded: () => void,
): (request: HttpRequest, visitor: Visitor, segments: readonly string[], show: Show) => Promise<HttpReply | null> {
  return async (request, visitor, segments, show) => {
    if (request.method !== 'POST') return null;
    const [area, id, sub, subId, subAction] = segments;
    const action =
      area === 'dags' && id !== undefined && (sub === 'trigger' || sub === 'pause' || sub === 'unpause') && subId === undefined
        ? sub
        : area === 'dags' && id !== undefined && sub === 'runs' && subId !== undefined && subAction === 'clear'
          ? 'clear-run'
          : area === 'ti' && id !== undefined && /^\d{1,15}$/.test(id) && (sub === 'clear' || sub === 'mark' || sub === 'input') && subId === undefined
            ? `ti-${sub}`
            : area === 'signals' && id === undefined
              ? 'signal'
              : null;
    if (action === null) return null;
    if (request.body === null) return show('Not done', '', refusedContent('the form is too large'), 413);
    const form = new URLSearchParams(request.body ?? '');
    const refusal = access.formRefusal(request, visitor, form);
    if (refusal !== null) return show('Not done', '', refusedContent(refusal), 403);
    const actions = new OperatorActions(database, access.actorOf(request, visitor));
    const forms = new OperatorForms(access.csrfToken!);
    const confirmed = form.get('confirmed') === 'yes';
    const done = (target: string): HttpReply => ({
      status: 303,
      headers: { location: `${target}${target.includes('?') ? '&' : '?'}done=${actions.lastAuditId ?? ''}`, 'cache-control': 'no-store' },
      body: '',
    });
    try {
      if (action === 'trigger') {
        const runId = await actions.triggerRun(id!, { conf: confOf(form.get('conf')), runId: textOf(form.get('run_id')) });
        return done(href(['dags', id!, 'runs', runId]));
      }
      if (action === 'pause' || action === 'unpause') {
        await actions.setPaused(id!, action === 'pause');
        return done(href(['dags', id!]));
      }
      if (action === 'clear-run') {
        const wanted = { dagId: id!, runId: subId! };
        if (!confirmed) {
          const plan = await actions.planClear(wanted);
          return show(
            'Clear the run?',
            '/dags',
            confirmation(
              html`Clear run <b>${plan.runId}</b> of DAG <b>${plan.dagId}</b>: its ${plan.taskIds.length} task instance(s) (${plan.taskIds.join(', ')}) go back to no state and run again; a deferred one's trigger is stopped.`,
              href(['dags', id!, 'runs', subId!, 'clear']),
              forms,
              {},
              href(['dags', id!, 'runs', subId!]),
            ),
          );
        }
        const result = await actions.clear(wanted);
        return done(href(['dags', result.dagId, 'runs', result.runId]));
      }
      if (action === 'signal') {
        const key = (form.get('key') ?? '').trim();
        if (key === '') return show('Not done', '/signals', refusedContent('give the signal a key'), 400);
        await actions.sendSignal(key, signalValueOf(form.get('value')));
        return done('/signals');
      }
      const taskInstanceId = Number(id);
      const ti = await storage.taskInstances.readTaskInstance({ id: taskInstanceId });
      if (!ti) return show('Not found', '', html`<h1>Not found</h1><p>There is no task instance ${taskInstanceId}.</p>`, 404);
      const where = html`task <b>${ti.task_id}</b>${ti.map_index >= 0 ? html` (map index ${ti.map_index})` : ''} of run <b>${ti.run_id}</b> of DAG <b>${ti.dag_id}</b> (task instance ${ti.id}, now ${ti.state ?? 'in no state'})`;
      if (action === 'ti-clear') {
        const downstream = form.get('downstream') === 'yes';
        // This task instance only: of a mapped task, its own map index (the tasks downstream whole).
        const wanted = { dagId: ti.dag_id, runId: ti.run_id, taskIds: [ti.task_id], mapIndexes: [ti.map_index], downstream };
        if (!confirmed) {
          const plan = await actions.planClear(wanted);
          const others = plan.taskIds.filter((taskId) => taskId !== ti.task_id);
          return show(
            'Clear?',
            '/dags',
            confirmation(
              html`Clear ${where}${others.length > 0 ? html` and the ${others.length} task(s) downstream of it (${others.join(', ')})` : ''}: back to no state, to run again with its retries renewed; a deferred one's trigger is stopped.`,
              href(['ti', ti.id, 'clear']),
              forms,
              { downstream: downstream ? 'yes' : 'no' },
              href(['ti', ti.id]),
            ),
          );
        }
        const result = await actions.clear(wanted);
        return done(href(['dags', result.dagId, 'runs', result.runId]));
      }
      if (action === 'ti-mark') {
        const state = form.get('state');
        if (state !== 'success' && state !== 'failed') return show('Not done', '', refusedContent('mark it success or failed'), 400);
        if (!confirmed)
          return show(
            `Mark ${state}?`,
            '/dags',
            confirmation(
              html`Mark ${where} <b>${state}</b>: ${ti.state === 'running' ? 'its worker ends the running try so' : 'whatever it waits on is dropped'}; the tasks downstream follow their trigger rules.`,
              href(['ti', ti.id, 'mark']),
              forms,
              { state },
              href(['ti', ti.id]),
            ),
          );
        await actions.mark(ti.id, state);
        return done(href(['ti', ti.id]));
      }
      // ti-input: the question's form, as a person fills it in.
      const input = await storage.inputs.readTaskInput(ti.id);
      if (!input) return show('Not done', '', refusedContent(`task instance ${ti.id} asks no question`), 400);
      await actions.respond(ti.id, formChoices(input, form));
      onResponded();
      return done(href(['ti', ti.id]));
    } catch (error) {
      if (!(error instanceof DeferflowError)) throw error;
      return show(
        'Not done',
        '',
        refusedContent(error.message, error.code),
        error.code === 'DF_INPUT_ALREADY_GIVEN' || error.code === 'DF_NOT_AWAITING_INPUT' ? 409 : 400,
      );
    }
  };
}

/** GET /dags/<dag>/trigger: the form that triggers a run with conf. */
export function triggerForm(dagId: string, forms: OperatorForms | null): Html {
  if (forms === null) return html`<h1>Trigger ${dagId}</h1>${needsOperator()}`;
  return html`<h1>Trigger a run of <a href="${href(['dags', dagId])}">${dagId}</a></h1>
<form id="trigger" method="post" action="${href(['dags', dagId, 'trigger'])}">${forms.hidden()}
<p><label>Conf (a JSON object)<br><textarea name="conf" rows="8" cols="70">{}</textarea></label></p>
<p><label>Run id <input name="run_id" placeholder="manual__&lt;now&gt;" size="40"></label> <span class="muted">(optional)</span></p>
<button type="submit">Trigger</button></form>`;
}

/** GET /signals: the keys sent on lately, and (for an operator) the form that sends one. */
export async function signalsPage(storage: Stores, forms: OperatorForms | null): Promise<Html> {
  const keys = await storage.signals.recentSignalKeys(100);
  const now = Date.now();
  return html`<h1>Signals</h1>
${
  forms === null
    ? ''
    : html`<form id="send-signal" method="post" action="/signals">${forms.hidden()}
<label>Key <input name="key" required size="30"></label> <label>Value (JSON) <input name="value" value="null" size="40"></label> <button type="submit">Send</button></form>`
}
${
  keys.length === 0
    ? html`<p class="muted">No signal sent yet.</p>`
    : html`<table id="signal-keys"><tr><th>key</th><th>latest version</th><th>sent</th></tr>
${keys.map((key) => html`<tr data-key="${key.key}"><td><a href="${href(['signals', key.key])}"><code>${key.key}</code></a></td><td class="num">${key.version}</td><td title="${isoMoment(key.sentAt)}">${ago(now - key.sentAt)} ago</td></tr>`)}</table>`
}
<p class="muted">Who sent each version is on the key's page; sends from here and the CLI are in the <a href="/audit">audit log</a> too.</p>`;
}

/** The versions of one key a page shows. */
const SIGNAL_VERSIONS_SHOWN = 100;

/**
 * GET /signals/<key>: the key's latest versions, newest first, each with its value (connection
 * secrets masked, as in logs) and who sent it (an operator from this page or the CLI, a client of
 * POST /signals/:key, a task, the embedded API; not recorded before migration 0022). Null: never sent.
 */
export async function signalKeyPage(storage: Stores, masker: SecretMasker, key: string): Promise<Html | null> {
  const versions = await storage.signals.listSignalVersions(key, SIGNAL_VERSIONS_SHOWN);
  if (versions.length === 0) return null;
  const shown = (value: unknown) => {
    const text = masker.mask(JSON.stringify(value));
    return text.length > 300 ? `${text.slice(0, 300)}…` : text;
  };
  return html`<h1>Signal <code>${key}</code></h1>
<p class="muted">Its latest ${versions.length === SIGNAL_VERSIONS_SHOWN ? SIGNAL_VERSIONS_SHOWN : ''} versions, newest first. Older ones are pruned by the triggerers after --signal-retention, the latest kept.</p>
<table id="signal-versions"><tr><th>version</th><th>sent</th><th>value</th><th>sent by</th></tr>
${versions.map(
  (
    signal,
  ) => html`<tr data-version="${signal.version}"><td class="num">${signal.version}</td><td>${isoMoment(signal.sentAt)}</td><td><code>${shown(signal.value)}</code></td>
<td>${signal.sentBy ?? html`<span class="muted">not recorded</span>`}</td></tr>`,
)}</table>`;
}

/** GET /audit: what people did, newest first, a page at a time. */
export async function auditPage(storage: Stores, before: number | undefined): Promise<Html> {
  const rows = await storage.audit.listAuditEntries({ limit: AUDIT_PAGE_ROWS, before });
  const target = (row: AuditRecord) =>
    row.taskInstanceId !== null
      ? html`<a href="${href(['ti', row.taskInstanceId])}">${row.dagId} · ${row.runId} · ${String(row.details.task_id ?? row.taskInstanceId)}</a>`
      : row.runId !== null && row.dagId !== null
        ? html`<a href="${href(['dags', row.dagId, 'runs', row.runId])}">${row.dagId} · ${row.runId}</a>`
        : row.dagId !== null
          ? html`<a href="${href(['dags', row.dagId])}">${row.dagId}</a>`
          : typeof row.details.key === 'string'
            ? html`signal <code>${row.details.key}</code>`
            : '';
  return html`<h1>Audit log</h1>
<p class="muted">Every action people took, from this page and from the CLI: who, when, what, from where. <code>deferflow db clean</code> prunes it with the rest.</p>
${
  rows.length === 0
    ? html`<p class="muted">No action recorded${before !== undefined ? ' before this point' : ''}.</p>`
    : html`<table id="audit"><tr><th>when</th><th>who</th><th>from</th><th>action</th><th>on</th><th>what came of it</th></tr>
${rows.map(
  (
    row,
  ) => html`<tr data-audit="${row.id}"><td>${isoMoment(row.at)}</td><td>${row.actor}</td><td>${row.source}${row.address ? html` <span class="muted">${row.address}</span>` : ''}</td>
<td><code>${row.action}</code></td><td>${target(row)}</td><td>${row.outcome}</td></tr>`,
)}</table>`
}
<div class="pager">${before !== undefined ? html`<a href="/audit">← newest</a>` : ''}${rows.length === AUDIT_PAGE_ROWS ? html`<a href="${href(['audit'], { before: rows.at(-1)!.id })}">older →</a>` : ''}</div>`;
}

/** The notice of a done action (`?done=<audit id>`): what came of it, read from the audit log itself. */
export async function doneNotice(storage: Stores, doneId: string | null): Promise<Html> {
  if (doneId === null || !/^\d{1,15}$/.test(doneId)) return html``;
  const [entry] = await storage.audit.listAuditEntries({ limit: 1, before: Number(doneId) + 1 });
  if (!entry || entry.id !== Number(doneId)) return html``;
  return html`<p id="done" class="notice"><b>${entry.action.replace(/_/g, ' ')}</b> by ${entry.actor}: ${entry.outcome}</p>`;
}

const AUDIT_PAGE_ROWS = 100;

/** What an operator's form needs, said to a viewer. */
export function needsOperator(): Html {
  return html`<p class="muted" id="needs-operator">Acting here needs the operator role: <a href="/sign-in">sign in</a> with the operator token.</p>`;
}

function confirmation(what: Html, action: string, forms: OperatorForms, fields: Record<string, string>, cancel: string): Html {
  return html`<h1>Confirm</h1><p id="confirm-what">${what}</p>
<form id="confirm" method="post" action="${action}">${forms.hidden({ ...fields, confirmed: 'yes' })}<button type="submit">Confirm</button> <a href="${cancel}">Cancel</a></form>`;
}

function refusedContent(message: string, code?: string): Html {
  return html`<h1>Not done</h1><p id="refused"${new Html(code ? ` data-code="${code}"` : '')}>${message}</p><p class="muted">Nothing was changed.</p>`;
}

function textOf(value: string | null): string | undefined {
  const text = (value ?? '').trim();
  return text === '' ? undefined : text;
}

function confOf(text: string | null): JsonObject {
  const trimmed = (text ?? '').trim();
  if (trimmed === '') return {};
  let conf: JsonValue;
  try {
    conf = JSON.parse(trimmed) as JsonValue;
  } catch {
    throw new NotJsonError('conf', `${JSON.stringify(trimmed.slice(0, 200))} is not JSON: give a JSON object, e.g. {"rows": 120}`, false);
  }
  assertJsonObject(conf, 'conf');
  return conf;
}

function signalValueOf(text: string | null): JsonValue {
  const trimmed = (text ?? '').trim();
  if (trimmed === '') return null;
  try {
    return JSON.parse(trimmed) as JsonValue;
  } catch {
    throw new NotJsonError(
      'value',
      `${JSON.stringify(trimmed.slice(0, 200))} is not JSON: quote text as a JSON string ("done"), or give null, a number, an object`,
      false,
    );
  }
}
