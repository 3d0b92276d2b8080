import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describeThrown } from '../errors.ts';

/**
 * Why a user's file (a DAG file, a trigger module) failed to import, with what to do about it
 * when the cause is one users hit: a `.ts`/`.js` file outside an ESM package is read as CommonJS,
 * or a package it imports (deferflow itself, typically) is not installed where it can find it.
 */
export function explainLoadFailure(file: string, error: unknown): string {
  const described = describeThrown(error).error;
  const hint = hintFor(path.resolve(file), described);
  return hint === null ? described : `${described}; ${hint}`;
}

const COMMONJS_SYMPTOMS = /Cannot use import statement outside a module|Unexpected (identifier|token)|require\(\) ES Module|ERR_REQUIRE_ESM|Cannot require\(\) ES Module/;

function hintFor(file: string, message: string): string | null {
  const missing = /Cannot find (?:package|module) '([^']+)'/.exec(message);
  if (missing && !missing[1]!.startsWith('.') && !missing[1]!.startsWith('/')) {
    const name = missing[1]!.startsWith('@') ? missing[1]!.split('/').slice(0, 2).join('/') : missing[1]!.split('/')[0]!;
    return `${name} is not installed where ${path.basename(file)} can find it: run \`npm install ${name}\` in the project that holds ${file}`;
  }
  if (/\.(ts|js)$/.test(file) && COMMONJS_SYMPTOMS.test(message)) {
    const manifest = nearestPackageJson(path.dirname(file));
    if (manifest === null) return `${file} is read as CommonJS: no package.json above it says "type": "module"; rename it .mts (.mjs), or run \`npm init -y && npm pkg set type=module\` in its project`;
    if (manifest.type !== 'module') return `${file} is read as CommonJS: ${manifest.path} has no "type": "module"; rename it .mts (.mjs), or run \`npm pkg set type=module\` there`;
  }
  return null;
}

function nearestPackageJson(dir: string): { path: string; type: unknown } | null {
  for (let at = dir; ; at = path.dirname(at)) {
    const candidate = path.join(at, 'package.json');
    if (existsSync(candidate)) {
      try {
        return { path: candidate, type: (JSON.parse(readFileSync(candidate, 'utf8')) as { type?: unknown }).type };
      } catch {
        return { path: candidate, type: undefined };
      }
    }
    if (path.dirname(at) === at) return null;
  }
}
