import { createHmac, timingSafeEqual } from 'node:crypto';
import { InputLinkInvalidError } from '../../vocabulary/errors.ts';

/**
 * Signed one-shot links for human input: a token naming the task instance, the try and the
 * question (its nonce) it was made for, and until when it is valid (the question's timeout),
 * with an HMAC-SHA256 of all that under the deployment's link key (storage/link-secret.ts). No
 * login is needed to use one: it is for an email or a chat message. One-shot because the first
 * response wins (later ones get DF_INPUT_ALREADY_GIVEN); a link for a replaced question, another
 * try or a cleared task instance no longer matches what the database holds.
 *
 *   <task instance>.<try>.<nonce>.<expires, epoch seconds; 0: never>.<signature>
 */
export interface InputLinkClaims {
  readonly taskInstanceId: number;
  readonly tryNumber: number;
  readonly nonce: string;
  /** Epoch ms; null: valid while the question is asked. */
  readonly expiresAt: number | null;
}

const LABEL = 'deferflow input link v1:';
const TOKEN = /^(\d{1,15})\.(\d{1,9})\.([A-Za-z0-9_-]{16,64})\.(\d{1,12})\.([A-Za-z0-9_-]{43})$/;

export function signInputToken(key: Buffer, claims: InputLinkClaims): string {
  const payload = `${claims.taskInstanceId}.${claims.tryNumber}.${claims.nonce}.${claims.expiresAt === null ? 0 : Math.ceil(claims.expiresAt / 1000)}`;
  return `${payload}.${signature(key, payload)}`;
}

/**
 * The claims of a token whose signature is right and which has not expired; throws
 * DF_INPUT_LINK_INVALID otherwise (`reason` signature or expired), before any database read.
 */
export function verifyInputToken(key: Buffer, token: string, now: number): InputLinkClaims {
  const match = TOKEN.exec(token);
  if (!match) throw new InputLinkInvalidError('this link is not a deferflow input link (it is cut short or altered); nothing was recorded', 'signature');
  const payload = `${match[1]}.${match[2]}.${match[3]}.${match[4]}`;
  const expected = Buffer.from(signature(key, payload));
  const given = Buffer.from(match[5]!);
  if (expected.length !== given.length || !timingSafeEqual(expected, given))
    throw new InputLinkInvalidError('this link was altered or made for another deployment (its signature does not match); nothing was recorded', 'signature');
  const expiresSeconds = Number(match[4]);
  const expiresAt = expiresSeconds === 0 ? null : expiresSeconds * 1000;
  if (expiresAt !== null && now >= expiresAt)
    throw new InputLinkInvalidError(`this link expired at ${new Date(expiresAt).toISOString()} (the question's timeout); nothing was recorded`, 'expired');
  return { taskInstanceId: Number(match[1]), tryNumber: Number(match[2]), nonce: match[3]!, expiresAt };
}

/** The page a link opens: `<publicUrl>/input/<token>`. */
export function inputLinkUrl(publicUrl: string, token: string): string {
  return `${publicUrl.replace(/\/+$/, '')}/input/${token}`;
}

function signature(key: Buffer, payload: string): string {
  return createHmac('sha256', key)
    .update(LABEL + payload)
    .digest('base64url');
}
