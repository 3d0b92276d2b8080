import { EncryptionKeyError } from '../../vocabulary/errors.ts';

/**
 * The layout of a sealed value, in one place: Keyring (keyring.ts) writes and reads it on the
 * event loop, and the sealing service's source (sealing-service.ts) is built from these constants,
 * so the two cannot drift apart. Only constants and functions of a value live here: the thread's
 * code is plain text run with `eval`, which can take a number or a string but not an import.
 *
 *   text:  "dfenc1:<key id>:<base64 of iv | GCM tag | AES-256-GCM ciphertext>"
 *   bytes: BYTES_FORMAT | key id length (1 byte) | key id (ASCII) | iv | GCM tag | ciphertext
 *
 * A stored value read back starts with a format marker this version knows (the prefix, or the
 * format byte) or it is not a sealed value: a later format takes a new prefix and a new byte.
 */
const TEXT_PREFIX = 'dfenc1:';
/** The stored text of a sealed value starts with this: the JSON string's quote, then the prefix. */
export const STORED_TEXT_PREFIX = `"${TEXT_PREFIX}`;
/** The first byte of a value sealed in bytes form; another first byte is a format this version does not read. */
export const BYTES_FORMAT = 1;
/** GCM's IV: 96 random bits per value (NIST SP 800-38D). */
export const IV_BYTES = 12;
/** GCM's full-length tag: shorter tags weaken forgery resistance, and save only a few bytes. */
export const TAG_BYTES = 16;
/** IVs are drawn from the CSPRNG in blocks: one call per 4,096 seals instead of one each. */
export const IV_POOL_BYTES = IV_BYTES * 4096;

/** What a value sealed in bytes form with key `id` starts with: the format, the id's length, the id. */
export function bytesHeader(id: string): Buffer {
  return Buffer.from([BYTES_FORMAT, id.length, ...Buffer.from(id, 'latin1')]);
}

/**
 * A value sealed in bytes form taken apart: the key id, and the body (iv | tag | ciphertext)
 * as a view of the same bytes; null if it is not one (another format byte, too short).
 */
export function sealedBytesParts(stored: Uint8Array): { readonly keyId: string; readonly body: Buffer } | null {
  const length = stored[1];
  if (stored[0] !== BYTES_FORMAT || length === undefined || stored.length < 2 + length + IV_BYTES + TAG_BYTES) return null;
  const bytes = Buffer.from(stored.buffer, stored.byteOffset, stored.byteLength);
  return { keyId: bytes.toString('latin1', 2, 2 + length), body: bytes.subarray(2 + length) };
}

/**
 * The error for bytes that are not a value deferflow sealed. `holder` names where they were
 * read (`task instance 7: its task_instance.next_event`), if that is known.
 */
export function notSealedBytesError(stored: Uint8Array, holder?: string): EncryptionKeyError {
  return new EncryptionKeyError(
    `${holder === undefined ? 'a value given as sealed is' : `${holder} holds`} ${stored.byteLength} bytes that are not a value deferflow sealed ` +
      `(format byte ${stored[0] ?? 'missing'}, this version reads ${BYTES_FORMAT}): it was altered, or written by a newer deferflow; ` +
      'run every daemon on the same version',
  );
}
