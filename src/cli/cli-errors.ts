import { DeferflowError } from '../errors.ts';

/** Exit code for refused input or a failed command (2 is yargs' own usage error too). */
export const DEFERFLOW_ERROR_EXIT = 2;

export function formatCliError(error: unknown): string {
  if (error instanceof DeferflowError) return `error [${error.code}]: ${error.message}`;
  if (error instanceof Error) return `error: ${error.message}`;
  return `error: ${String(error)}`;
}
