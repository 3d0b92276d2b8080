import { timingSafeEqual } from 'node:crypto';
import { InvalidOptionError } from '../errors.ts';

/**
 * A token option (the signal endpoint's, the status page's): null when unset; else 16
 * characters or more without spaces, refused naming the option otherwise. `offWithout` ends the
 * message when the token also switches something on.
 */
export function tokenOption(value: unknown, name: string, offWithout = ''): string | null {
  const text = String(value ?? '');
  if (text === '') return null;
  if (text.length < 16 || /\s/.test(text)) {
    throw new InvalidOptionError(name, `must be 16 characters or more, without spaces (e.g. \`openssl rand -hex 24\`)${offWithout}`);
  }
  return text;
}

/** Whether `given` is `token`, compared in constant time (a wrong guess says nothing of how wrong). */
export function sameToken(given: string | undefined, token: Buffer): boolean {
  if (given === undefined) return false;
  const buffer = Buffer.from(given);
  return buffer.length === token.length && timingSafeEqual(buffer, token);
}
