import { ERROR_CODES } from '../vocabulary/errors.ts';

/** Exit code for refused input or a failed command (2 is yargs' own usage error too). */
export const DEFERFLOW_ERROR_EXIT = 2;

export function formatCliError(error: unknown): string {
  // By shape: an error from user code (a DAG file, a trigger module) may come from its own copy of deferflow.
  const code = typeof error === 'object' && error !== null ? (error as { code?: unknown }).code : undefined;
  if (error instanceof Error && (ERROR_CODES as readonly unknown[]).includes(code)) return `error [${String(code)}]: ${error.message}`;
  if (error instanceof Error) return `error: ${error.message}`;
  return `error: ${String(error)}`;
}
