import path from 'node:path';
import { describeThrown } from '../../vocabulary/errors.ts';

/**
 * Why a user's file (a DAG file, a trigger module) failed to import, with what to do about it
 * when the cause is one users hit: a package it imports (deferflow itself, typically) is not
 * installed where it can find it.
 */
export function explainLoadFailure(file: string, error: unknown): string {
  const described = describeThrown(error).error;
  const hint = hintFor(path.resolve(file), described);
  return hint === null ? described : `${described}; ${hint}`;
}

function hintFor(file: string, message: string): string | null {
  const missing = /Cannot find (?:package|module) '([^']+)'/.exec(message);
  if (missing && !missing[1]!.startsWith('.') && !missing[1]!.startsWith('/')) {
    const name = missing[1]!.startsWith('@') ? missing[1]!.split('/').slice(0, 2).join('/') : missing[1]!.split('/')[0]!;
    return `${name} is not installed where ${path.basename(file)} can find it: run \`npm install ${name}\` in the project that holds ${file}`;
  }
  return null;
}
