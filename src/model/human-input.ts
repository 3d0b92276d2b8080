import { InvalidInputRequestError, InvalidInputResponseError } from '../vocabulary/errors.ts';
import type { JsonObject, JsonValue } from '../vocabulary/serialization/json.ts';

/*
 * Human input (Airflow 3.1's human-in-the-loop): a task asks a person a question and waits in
 * the state `awaiting_input`, holding no worker slot and no trigger row, until a response comes
 * (a signed link, the CLI, the HTTP API, the embedded API, the status page) or its timeout
 * passes. This module is the question and the response, and the rules a response must meet; it
 * touches no database. The first valid response wins (storage/respond-to-input.ts).
 */

/** The kinds of form field a question may have. */
export const INPUT_FIELD_TYPES = ['text', 'number', 'boolean', 'choice'] as const;
/** A form field's kind: text, number, boolean or choice. */
export type InputFieldType = (typeof INPUT_FIELD_TYPES)[number];

/** One field of a question's form. */
export interface InputField {
  /** The key its value is given under: letters, digits, `_`, `-` and `.`. */
  readonly name: string;
  /** What the form shows beside it. Default: its name. */
  readonly label?: string;
  /** text (a string), number, boolean, or choice (one of `choices`). */
  readonly type: InputFieldType;
  /** The values a `choice` field offers. */
  readonly choices?: readonly string[];
  /** What the form is filled with, and what the field takes when a response leaves it out. */
  readonly default?: JsonValue;
  /** Whether a response must give it (a field with a default never needs to). Default true. */
  readonly required?: boolean;
}

/** What a task asks a person. */
export interface InputQuestion {
  /** One line: what is asked (a mail's subject, the page's heading). */
  readonly subject: string;
  /** More text (plain), or null. */
  readonly body: string | null;
  /** The answers offered as buttons (approve / reject, the branches to follow); may be empty when the form is all. */
  readonly options: readonly string[];
  /** Whether several options may be chosen. */
  readonly multiple: boolean;
  /** The form's fields. */
  readonly fields: readonly InputField[];
  /**
   * What is chosen when the timeout passes with no response, recorded as given by `timeout`:
   * the options, and field values over the fields' own defaults. Null: the task fails instead
   * (DF_INPUT_TIMEOUT).
   */
  readonly defaults: { readonly chosen: readonly string[]; readonly values: JsonObject } | null;
}

/** Where a response came from. */
export const INPUT_SOURCES = ['link', 'cli', 'http', 'api', 'page', 'timeout'] as const;
/** How a response came: a signed link, the CLI, the HTTP API, the embedded API, the status page, or the timeout's defaults. */
export type InputSource = (typeof INPUT_SOURCES)[number];

/** What a person answers: the options chosen and the form's values. */
export interface InputAnswer {
  /** The options chosen. */
  readonly chosen: readonly string[];
  /** The form's values, by field name (fields left out take their defaults). */
  readonly values: JsonObject;
}

/** The response a task resumes with (its method's second argument). */
export interface InputResponse extends InputAnswer {
  /** Who responded (a name given with the response; `timeout` when the defaults applied). */
  readonly by: string;
  /** When (ISO-8601, UTC). */
  readonly at: string;
  /** How it came. */
  readonly source: InputSource;
}

const NAME = /^[A-Za-z0-9_.-]{1,100}$/;
const MAX_TEXT = 10_000;

/** The question as stored, checked: throws DF_INVALID_INPUT_REQUEST naming what is wrong. */
export function checkQuestion(raw: {
  readonly subject?: unknown;
  readonly body?: unknown;
  readonly options?: unknown;
  readonly multiple?: unknown;
  readonly fields?: unknown;
  readonly defaults?: unknown;
}): InputQuestion {
  const refuse = (what: string): never => {
    throw new InvalidInputRequestError(`awaitInput: ${what}`);
  };
  if (typeof raw.subject !== 'string' || raw.subject.trim() === '' || raw.subject.length > 500)
    refuse('subject must be a non-empty string of at most 500 characters');
  if (raw.body !== undefined && raw.body !== null && (typeof raw.body !== 'string' || raw.body.length > MAX_TEXT))
    refuse(`body must be a string of at most ${MAX_TEXT} characters`);
  const options = raw.options ?? [];
  if (!Array.isArray(options) || options.some((option) => typeof option !== 'string' || option === '' || option.length > 200))
    refuse('options must be a list of non-empty strings');
  if (new Set(options as string[]).size !== (options as string[]).length) refuse('options must not repeat');
  if (raw.multiple !== undefined && typeof raw.multiple !== 'boolean') refuse('multiple must be true or false');
  const fields = (raw.fields ?? []) as readonly InputField[];
  if (!Array.isArray(fields)) refuse('fields must be a list of { name, type }');
  const names = new Set<string>();
  for (const field of fields) {
    if (typeof field !== 'object' || field === null || typeof field.name !== 'string' || !NAME.test(field.name))
      refuse(`each field needs a name of letters, digits, "_", "-" or "." (got ${JSON.stringify(field)})`);
    if (names.has(field.name)) refuse(`field ${field.name} is named twice`);
    names.add(field.name);
    if (!(INPUT_FIELD_TYPES as readonly string[]).includes(field.type)) refuse(`field ${field.name}: type must be one of ${INPUT_FIELD_TYPES.join(', ')}`);
    if (field.type === 'choice' && (!Array.isArray(field.choices) || field.choices.length === 0 || field.choices.some((c: unknown) => typeof c !== 'string')))
      refuse(`field ${field.name}: a choice field needs choices, a list of strings`);
    if (field.label !== undefined && typeof field.label !== 'string') refuse(`field ${field.name}: label must be a string`);
    if (field.required !== undefined && typeof field.required !== 'boolean') refuse(`field ${field.name}: required must be true or false`);
    if (field.default !== undefined) {
      const problem = fieldValueProblem(field, field.default);
      if (problem) refuse(`field ${field.name}: its default ${problem}`);
    }
  }
  if ((options as string[]).length === 0 && fields.length === 0) refuse('ask for something: give options, fields, or both');
  const question: InputQuestion = {
    subject: raw.subject as string,
    body: (raw.body as string | null | undefined) ?? null,
    options: options as string[],
    multiple: raw.multiple === true,
    fields: fields.map((field) => Object.fromEntries(Object.entries(field).filter(([, value]) => value !== undefined)) as unknown as InputField),
    defaults: null,
  };
  if (raw.defaults !== undefined && raw.defaults !== null) {
    if (!isObject(raw.defaults)) refuse('defaults must be { chosen?, values? }');
    const defaults = raw.defaults as { chosen?: unknown; values?: unknown };
    const answer = { chosen: (defaults.chosen ?? []) as string[], values: (defaults.values ?? {}) as JsonObject };
    try {
      checkAnswer(question, answer);
    } catch (error) {
      refuse(`defaults do not answer the question: ${(error as Error).message}`);
    }
    return { ...question, defaults: { chosen: answer.chosen, values: answer.values } };
  }
  return question;
}

/**
 * The answer completed and checked against the question: options it offers (one unless
 * `multiple`; at least one when it offers any), every required field given, each value of its
 * field's type, fields left out taking their defaults. Throws DF_INVALID_INPUT_RESPONSE.
 */
export function checkAnswer(question: InputQuestion, answer: { readonly chosen?: unknown; readonly values?: unknown }): InputAnswer {
  const refuse = (what: string): never => {
    throw new InvalidInputResponseError(`the response to "${question.subject}" ${what}; nothing was recorded`);
  };
  const chosen = answer.chosen ?? [];
  if (!Array.isArray(chosen) || chosen.some((option) => typeof option !== 'string')) refuse('must choose options by name (a list of strings)');
  for (const option of chosen as string[]) {
    if (!question.options.includes(option))
      refuse(
        `chooses ${JSON.stringify(option)}, which is not offered (the options are ${question.options.map((o) => JSON.stringify(o)).join(', ') || 'none'})`,
      );
  }
  if (new Set(chosen as string[]).size !== (chosen as string[]).length) refuse('chooses an option twice');
  if (question.options.length > 0 && (chosen as string[]).length === 0) refuse(`must choose ${question.multiple ? 'at least one option' : 'one option'}`);
  if (!question.multiple && (chosen as string[]).length > 1) refuse('chooses several options, but only one may be chosen');
  const given = answer.values ?? {};
  if (!isObject(given)) refuse('must give field values as an object');
  const values: JsonObject = {};
  for (const name of Object.keys(given as JsonObject)) {
    if (!question.fields.some((field) => field.name === name)) refuse(`gives field ${JSON.stringify(name)}, which the form does not have`);
  }
  for (const field of question.fields) {
    const value = (given as JsonObject)[field.name];
    if (value === undefined || value === null) {
      if (field.default !== undefined) values[field.name] = field.default;
      else if (field.required !== false) refuse(`leaves out field ${field.name}, which is required`);
      continue;
    }
    const problem = fieldValueProblem(field, value);
    if (problem) refuse(`gives field ${field.name} ${problem}`);
    values[field.name] = value;
  }
  return { chosen: chosen as string[], values };
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

function fieldValueProblem(field: InputField, value: JsonValue): string | null {
  switch (field.type) {
    case 'text':
      return typeof value === 'string' && value.length <= MAX_TEXT ? null : `${JSON.stringify(value)}: expected text of at most ${MAX_TEXT} characters`;
    case 'number':
      return typeof value === 'number' && Number.isFinite(value) ? null : `${JSON.stringify(value)}: expected a number`;
    case 'boolean':
      return typeof value === 'boolean' ? null : `${JSON.stringify(value)}: expected true or false`;
    case 'choice':
      return typeof value === 'string' && field.choices!.includes(value) ? null : `${JSON.stringify(value)}: expected one of ${field.choices!.join(', ')}`;
  }
}

/**
 * A field's value from text (a form's input, `--field name=value`): a number parsed, a boolean
 * from true/false/yes/no/on/off, text as it is. Empty text is "not given". Throws
 * DF_INVALID_INPUT_RESPONSE for an unknown field or text that is not of its type.
 */
export function fieldValueFromText(question: InputQuestion, name: string, text: string): JsonValue | undefined {
  const field = question.fields.find((candidate) => candidate.name === name);
  if (!field)
    throw new InvalidInputResponseError(
      `the form of "${question.subject}" has no field ${JSON.stringify(name)} (it has ${question.fields.map((f) => f.name).join(', ') || 'none'})`,
    );
  if (text === '') return undefined;
  if (field.type === 'number') {
    const number = Number(text);
    if (!Number.isFinite(number)) throw new InvalidInputResponseError(`field ${name} takes a number, got ${JSON.stringify(text)}`);
    return number;
  }
  if (field.type === 'boolean') {
    const lower = text.toLowerCase();
    if (['true', 'yes', 'on', '1'].includes(lower)) return true;
    if (['false', 'no', 'off', '0'].includes(lower)) return false;
    throw new InvalidInputResponseError(`field ${name} takes true or false, got ${JSON.stringify(text)}`);
  }
  return text;
}

/** The response the timeout gives: the question's defaults, or null when it has none (the task fails). */
export function timeoutResponse(question: InputQuestion, at: number): InputResponse | null {
  if (question.defaults === null) return null;
  const answer = checkAnswer(question, question.defaults);
  return { ...answer, by: 'timeout', at: new Date(at).toISOString(), source: 'timeout' };
}
