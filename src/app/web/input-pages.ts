import type { InputResponse } from '../../model/human-input.ts';
import { fieldValueFromText } from '../../model/human-input.ts';
import type { GivenAnswer, InputService } from '../../services/human-input/input-service.ts';
import { clientAddress, jsonReply, type HttpReply, type HttpRequest } from '../../services/observability/http-server.ts';
import type { TaskInput } from '../../storage/index.ts';
import { codeOf, DeferflowError, InputAlreadyGivenError, InputLinkInvalidError } from '../../vocabulary/errors.ts';
import type { JsonObject, JsonValue } from '../../vocabulary/serialization/json.ts';
import { Html, html, isoMoment, page } from './html.ts';
import type { Database } from '../../database/connect.ts';
import { OperatorActions } from '../../services/operator-actions.ts';
import type { WebAccess } from './access.ts';

/*
 * Human input on the web:
 * - `GET /input/<token>`: the page a signed link opens (no login: the link is the permission).
 *   It shows the question and a form; `POST /input/<token>` records the response. The token in
 *   the address is what the form carries: another site cannot make a browser answer (it cannot
 *   know the token), which is the CSRF protection. The status page's own question page
 *   (`/ti/<id>/input`) shows the form to operators only, posting to itself (action-pages.ts).
 * - `POST /api/task-instances/<id>/input`: the HTTP API, a JSON body `{ chosen, values, by }`,
 *   with the operator token as a bearer token (never basic auth, which a browser sends by
 *   itself): answering is an operator's action, as on the status page; refused when no operator
 *   token is configured, and for the viewer token.
 * Every response recorded is in the audit log, with who gave it and from where.
 * Answers: 200 recorded; 400 a response that does not answer the question; 409 a second response
 * (the body names who gave the first and when) or a task instance not awaiting input; 403 a link
 * whose signature does not match; 410 a link expired, or made for a question no longer asked.
 */

/** Serves /input/<token> and the respond API; null for other paths. */
export function inputRoutes(
  database: Database,
  inputs: InputService,
  access: WebAccess,
  onResponded: () => void = () => {},
): (request: HttpRequest) => Promise<HttpReply | null> {
  return async (request) => {
    const path = new URL(request.url, 'http://deferflow.invalid').pathname;
    const link = /^\/input\/([^/]+)$/.exec(path);
    const api = link ? null : /^\/api\/task-instances\/(\d{1,15})\/input$/.exec(path);
    if (!link && !api) return null;
    const reply = link ? await linkPage(database, inputs, request, decodeURIComponent(link[1]!)) : await respondApi(database, access, request, Number(api![1]));
    if (request.method === 'POST' && reply.status === 200) onResponded();
    return reply;
  };
}

async function linkPage(database: Database, inputs: InputService, request: HttpRequest, token: string): Promise<HttpReply> {
  if (request.method === 'GET' || request.method === 'HEAD') {
    try {
      const input = await inputs.questionOfLink(token);
      return show(200, input.question.subject, questionPage(input, linkForm(token), null));
    } catch (error) {
      return refusal(error);
    }
  }
  if (request.method !== 'POST')
    return { status: 405, headers: { allow: 'GET, POST', 'content-type': 'text/plain' }, body: 'GET shows the question; POST answers it\n' };
  let input: TaskInput;
  try {
    input = await inputs.questionOfLink(token);
  } catch (error) {
    return refusal(error);
  }
  const form = new URLSearchParams(request.body ?? '');
  try {
    const answer = formAnswer(input, form);
    // The link is the permission; who answered is who the form says, from where the request came.
    const response = await new OperatorActions(database, { name: answer.by, source: 'link', address: clientAddress(request) }).respondByLink(
      token,
      answer,
      input,
    );
    return show(
      200,
      'Response recorded',
      html`<h1>Thank you</h1><p id="recorded">Your response to <b>${input.question.subject}</b> was recorded: ${describeResponse(response)}.</p>`,
    );
  } catch (error) {
    if (codeOf(error, 'DF_DATABASE') === 'DF_INVALID_INPUT_RESPONSE')
      return show(400, input.question.subject, questionPage(input, linkForm(token), (error as Error).message));
    return refusal(error);
  }
}

async function respondApi(database: Database, access: WebAccess, request: HttpRequest, taskInstanceId: number): Promise<HttpReply> {
  if (request.method !== 'POST') return json(405, { error: 'POST a JSON body { chosen, values, by }' }, { allow: 'POST' });
  if (!access.actionsEnabled)
    return json(403, {
      error: 'the respond API needs the operator token: set DEFERFLOW_WEB_OPERATOR_TOKEN (or --web-operator-token) and send it as a bearer token',
    });
  const bearer = /^Bearer (.+)$/i.test(request.headers.authorization ?? '');
  const visitor = bearer ? access.visitorOf(request) : null;
  if (visitor === null)
    return json(401, { error: 'a valid bearer token is needed: Authorization: Bearer <operator token>' }, { 'www-authenticate': 'Bearer realm="deferflow"' });
  if (visitor.role !== 'operator') return json(403, { error: 'answering is an operator action: send the operator token, not the viewer token' });
  if (request.body === null) return json(413, { error: 'the body is too large' });
  let body: { chosen?: unknown; values?: unknown; by?: unknown };
  try {
    body = JSON.parse(request.body ?? '') as typeof body;
  } catch {
    return json(400, { error: 'the body is not JSON: send { "chosen": [...], "values": {...}, "by": "name" }', code: 'DF_NOT_JSON' });
  }
  if (typeof body !== 'object' || body === null || typeof body.by !== 'string' || body.by.trim() === '')
    return json(400, { error: 'say who responds: { "by": "name", … }', code: 'DF_INVALID_INPUT_RESPONSE' });
  try {
    const response = await new OperatorActions(database, { name: body.by, source: 'web', address: clientAddress(request) }).respond(
      taskInstanceId,
      { chosen: body.chosen as string[] | undefined, values: body.values as JsonObject | undefined },
      'http',
    );
    return json(200, response as unknown as JsonValue);
  } catch (error) {
    const status = statusOf(error);
    if (status === null) throw error;
    return json(status, { error: (error as Error).message, code: (error as DeferflowError).code, ...alreadyGiven(error) });
  }
}

/** The status a refusal is answered with; null for an error that is not one (a database failure: 500). */
function statusOf(error: unknown): number | null {
  if (error instanceof InputLinkInvalidError) return error.reason === 'signature' ? 403 : 410;
  if (!(error instanceof DeferflowError)) return null;
  if (error.code === 'DF_INPUT_ALREADY_GIVEN' || error.code === 'DF_NOT_AWAITING_INPUT') return 409;
  if (error.code === 'DF_INVALID_INPUT_RESPONSE' || error.code === 'DF_NOT_JSON' || error.code === 'DF_NOT_STORABLE') return 400;
  return null;
}

function alreadyGiven(error: unknown): JsonObject {
  return error instanceof InputAlreadyGivenError ? { responded_by: error.respondedBy, responded_at: new Date(error.respondedAt).toISOString() } : {};
}

function refusal(error: unknown): HttpReply {
  const status = statusOf(error);
  if (status === null) throw error;
  const code = (error as DeferflowError).code;
  return show(status, 'Not recorded', html`<h1>Not recorded</h1><p id="refused" data-code="${code}">${(error as Error).message}</p>`);
}

/** The answer a submitted form gives: the options chosen (a button, or boxes), each field from its text, and who. */
function formAnswer(input: TaskInput, form: URLSearchParams): GivenAnswer {
  const by = (form.get('by') ?? '').trim();
  return { ...formChoices(input, form), by: by === '' ? 'anonymous (link)' : by };
}

/** What a submitted question form chose and filled in: the options chosen (a button, or boxes) and each field from its text (the status page's form too). */
export function formChoices(input: TaskInput, form: URLSearchParams): { chosen: string[]; values: JsonObject } {
  const values: JsonObject = {};
  for (const field of input.question.fields) {
    const text = field.type === 'boolean' ? (form.has(`field.${field.name}`) ? 'true' : 'false') : (form.get(`field.${field.name}`) ?? '');
    const value = fieldValueFromText(input.question, field.name, text);
    if (value !== undefined) values[field.name] = value;
  }
  return { chosen: form.getAll('choose'), values };
}

/** Where a question's form posts, what it carries besides the answer, and whether it asks who answers. */
export interface QuestionForm {
  readonly action: string;
  readonly hidden: Html;
  readonly askName: boolean;
}

/** The form of a signed link's page: it posts to the link's own address, and asks who answers. */
function linkForm(token: string): QuestionForm {
  return { action: `/input/${encodeURIComponent(token)}`, hidden: html``, askName: true };
}

/** The question and, unless `form` is null, its form; `error`: why the last try was refused. */
export function questionPage(input: TaskInput, form: QuestionForm | null, error: string | null): Html {
  const { question } = input;
  const where = html`<p class="muted">${input.dagId} · ${input.taskId} · run ${input.runId} · asked ${isoMoment(input.askedAt)}${input.timeoutAt === null ? '' : html` · open until ${isoMoment(input.timeoutAt)}`}</p>`;
  if (input.response)
    return html`<h1>${question.subject}</h1>${where}<p id="answered">Answered by <b>${input.response.by}</b> at ${input.response.at}: ${describeResponse(input.response)}.</p>`;
  const multiple = question.multiple && question.options.length > 0;
  const field = (f: (typeof question.fields)[number]) => {
    const name = `field.${f.name}`;
    const label = f.label ?? f.name;
    const initial = f.default === undefined ? '' : String(f.default);
    if (f.type === 'boolean') return html`<label><input type="checkbox" name="${name}"${new Html(f.default === true ? ' checked' : '')}> ${label}</label><br>`;
    if (f.type === 'choice')
      return html`<label>${label} <select name="${name}">${f.choices!.map((choice) => html`<option${new Html(choice === f.default ? ' selected' : '')}>${choice}</option>`)}</select></label><br>`;
    return html`<label>${label} <input name="${name}" type="${f.type === 'number' ? 'number' : 'text'}"${new Html(f.type === 'number' ? ' step="any"' : '')} value="${initial}"></label><br>`;
  };
  return html`<h1>${question.subject}</h1>${where}
${question.body ? html`<p id="body" style="white-space:pre-wrap">${question.body}</p>` : ''}
${error ? html`<p id="error" class="state state-failed">${error}</p>` : ''}
${
  form === null
    ? ''
    : html`<form id="respond" method="post" action="${form.action}">
${form.hidden}
${question.fields.map(field)}
${form.askName ? html`<label>Your name <input name="by" required></label><br>` : ''}
${multiple ? question.options.map((option) => html`<label><input type="checkbox" name="choose" value="${option}"> ${option}</label><br>`) : ''}
${
  multiple || question.options.length === 0
    ? html`<button type="submit">Submit</button>`
    : question.options.map((option) => html`<button type="submit" name="choose" value="${option}">${option}</button> `)
}
</form>`
}`;
}

function describeResponse(response: InputResponse): string {
  const parts = [
    ...(response.chosen.length > 0 ? [response.chosen.join(', ')] : []),
    ...Object.entries(response.values).map(([name, value]) => `${name} = ${JSON.stringify(value)}`),
  ];
  return parts.join('; ') || 'nothing chosen';
}

function show(status: number, title: string, content: Html): HttpReply {
  return { status, headers: { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' }, body: page(title, '', content, 0) };
}

/** The API's replies are never cached. */
function json(status: number, body: JsonValue, headers: Record<string, string> = {}): HttpReply {
  return jsonReply(status, body, { 'cache-control': 'no-store', ...headers });
}
