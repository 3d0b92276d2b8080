// The typed options are the source: each field's JSDoc says its meaning, unit and @default, and
// the option tables are keyed by the same fields (the compiler holds the names together in
// src/app/config.ts). The CLI derives each flag, environment variable and --help line from a
// field's table entry; this test holds each default to the field's @default. A default changed in
// one place and not the other fails here.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { COMMON_OPTIONS } from '../../src/daemons/common-options.ts';
import { SCHEDULER_OPTIONS } from '../../src/daemons/scheduler/options.ts';
import { TRIGGERER_OPTIONS } from '../../src/daemons/triggerer/options.ts';
import { WORKER_OPTIONS } from '../../src/daemons/worker/options.ts';
import { HTTP_OPTIONS } from '../../src/services/observability/options.ts';
import type { OptionSpec } from '../../src/vocabulary/options/option-table.ts';
import { REPO_ROOT } from '../support/processes.ts';

/** Each typed interface's fields: name → the text of its @default tag (null: none). */
function documentedDefaults(): Map<string, Map<string, string | null>> {
  const file = path.join(REPO_ROOT, 'src/app/config.ts');
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
  const interfaces = new Map<string, Map<string, string | null>>();
  source.forEachChild((node) => {
    if (!ts.isInterfaceDeclaration(node)) return;
    const fields = new Map<string, string | null>();
    for (const member of node.members) {
      if (!ts.isPropertySignature(member)) continue;
      const tag = ts.getJSDocTags(member).find((candidate) => candidate.tagName.text === 'default');
      const text = tag === undefined ? null : (ts.getTextOfJSDocComment(tag.comment) ?? '').trim();
      fields.set(member.name.getText(source), text);
    }
    interfaces.set(node.name.text, fields);
  });
  return interfaces;
}

/** A table's default as its field's @default should say it (durations: config fields take seconds). */
function expectedDefault(spec: OptionSpec): (documented: string) => boolean {
  const value = spec.default;
  if (Array.isArray(value)) return (documented) => documented.startsWith('[]') && value.length === 0;
  if (typeof value === 'boolean') return (documented) => documented === String(value);
  // No value: "none", or an empty list for a field that takes one.
  if (value === '') return (documented) => documented.startsWith('none') || documented === '[]';
  if (typeof value === 'string') return (documented) => documented === `'${value}'`;
  const seconds = spec.unit === 'milliseconds' ? Number(value) / 1000 : Number(value);
  return (documented) => {
    const match = /^(-?[\d.]+)(?:\s+(seconds?|minutes?|hours?|days?))?\b/.exec(documented);
    if (!match) return false;
    const factor = { second: 1, seconds: 1, minute: 60, minutes: 60, hour: 3600, hours: 3600, day: 86_400, days: 86_400 }[match[2] ?? 'second'] ?? 1;
    return Number(match[1]) * factor === seconds;
  };
}

const TOP_LEVEL: Record<string, OptionSpec> = {
  databaseUrl: COMMON_OPTIONS.databaseUrl,
  dagsFolder: WORKER_OPTIONS.dagsFolder,
  logLevel: COMMON_OPTIONS.logLevel,
  logFormat: COMMON_OPTIONS.logFormat,
};
/**
 * Fields a section takes from the top level of the config (or its http section), not as its own;
 * `traces` is the top level's `tracing` (an exporter object, not a flag's word).
 */
const FROM_TOP = new Set(['databaseUrl', 'dagsFolder', 'logLevel', 'logFormat', 'encryptionKeysFile', 'traces', ...Object.keys(HTTP_OPTIONS)]);

describe('the typed options', () => {
  const interfaces = documentedDefaults();

  it.each([
    ['WorkerConfig', WORKER_OPTIONS],
    ['SchedulerConfig', SCHEDULER_OPTIONS],
    ['TriggererConfig', TRIGGERER_OPTIONS],
  ] as const)('%s documents every field of its table with the same @default', (name, table: Readonly<Record<string, OptionSpec>>) => {
    const fields = interfaces.get(name)!;
    const disagreements = Object.entries(table)
      .filter(([field]) => !FROM_TOP.has(field))
      .flatMap(([field, spec]) => {
        if (!fields.has(field)) return [`${field}: no field ${name}.${field}`];
        const documented = fields.get(field);
        if (documented == null) return [`${name}.${field}: no @default (the table's is ${JSON.stringify(spec.default)})`];
        return expectedDefault(spec)(documented) ? [] : [`${name}.${field}: @default ${documented}, the table's ${JSON.stringify(spec.default)} ${spec.unit}`];
      });
    expect(disagreements).toEqual([]);
  });

  it('DeferflowConfig and HttpConfig say the defaults of their tables', () => {
    const checks: [string, string, OptionSpec][] = [
      ...Object.entries(TOP_LEVEL).map(([field, spec]) => ['DeferflowConfig', field, spec] as [string, string, OptionSpec]),
      // The section itself is what turns the endpoint on (the CLI's port "off" is its absence), so
      // a section without a port takes any free one: 0, as resolveDeferflowConfig passes it.
      ...Object.entries(HTTP_OPTIONS).map(
        ([field, spec]) => ['HttpConfig', field, field === 'port' ? { ...spec, default: 0 } : spec] as [string, string, OptionSpec],
      ),
    ];
    const disagreements = checks.flatMap(([name, field, spec]) => {
      const documented = interfaces.get(name)?.get(field);
      if (documented == null) return [`${name}.${field}: no @default`];
      return expectedDefault(spec)(documented) ? [] : [`${name}.${field}: @default ${documented}, the table's ${JSON.stringify(spec.default)} ${spec.unit}`];
    });
    expect(disagreements).toEqual([]);
  });
});
