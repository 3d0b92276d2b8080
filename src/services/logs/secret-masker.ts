import { listConnections } from '../../authoring/connections/connections.ts';

/** Shorter values are not masked: masking "1" or "ab" everywhere would garble logs and hide nothing. */
const SHORTEST_SECRET = 4;
export const MASK = '***';

/**
 * Replaces known secret values in text before it is logged or stored (Airflow's secrets
 * masker): the passwords, `password=` parameters and `__extra__` values of every connection the
 * environment defines, and whatever a caller adds (a trigger's secret kwargs). Each value is
 * also masked percent-decoded, as code that parsed the URL would log it.
 */
export class SecretMasker {
  readonly #secrets: string[];

  constructor(secrets: Iterable<string> = []) {
    this.#secrets = normalise(secrets);
  }

  /** The masker for the connections in `env`. */
  static fromEnvironment(env: NodeJS.ProcessEnv = process.env): SecretMasker {
    return new SecretMasker(listConnections(env).flatMap((connection) => connectionSecrets(connection.url)));
  }

  /** This masker, also masking `secrets` (shared: the original is left as it is). */
  with(secrets: Iterable<string>): SecretMasker {
    const more = normalise(secrets);
    return more.length === 0 ? this : new SecretMasker([...this.#secrets, ...more]);
  }

  get empty(): boolean {
    return this.#secrets.length === 0;
  }

  mask(text: string): string {
    let masked = text;
    for (const secret of this.#secrets) if (masked.includes(secret)) masked = masked.split(secret).join(MASK);
    return masked;
  }
}

function normalise(secrets: Iterable<string>): string[] {
  const all = new Set<string>();
  for (const secret of secrets) {
    if (typeof secret !== 'string' || secret.length < SHORTEST_SECRET) continue;
    all.add(secret);
    try {
      const decoded = decodeURIComponent(secret);
      if (decoded.length >= SHORTEST_SECRET) all.add(decoded);
    } catch {
      // not percent-encoded
    }
    // Inside JSON text (a stored line's fields), the value appears escaped.
    const escaped = JSON.stringify(secret).slice(1, -1);
    if (escaped !== secret) all.add(escaped);
  }
  // Longest first, so a secret containing another is masked whole.
  return [...all].sort((a, b) => b.length - a.length);
}

/** The secret parts of a connection URL: its password, `password=` and `__extra__` values. */
function connectionSecrets(url: string): string[] {
  const secrets: string[] = [];
  const userinfo = /^[a-z][a-z0-9+.-]*:\/\/[^:/@?#]+:([^@/?#]*)@/i.exec(url);
  if (userinfo?.[1]) secrets.push(userinfo[1]);
  for (const match of url.matchAll(/[?&](?:password|__extra__)=([^&#]*)/gi)) if (match[1]) secrets.push(match[1]);
  return secrets;
}

/** `fields` with secrets masked in every value (a copy; the same object when nothing is masked). */
export function maskFields(masker: SecretMasker, fields: Record<string, unknown>): Record<string, unknown> {
  if (masker.empty) return fields;
  const text = JSON.stringify(fields);
  const masked = masker.mask(text);
  return masked === text ? fields : (JSON.parse(masked) as Record<string, unknown>);
}

/**
 * The values of the kwargs a trigger class declares secret (`static secretKwargs = ['token']`):
 * strings as they are, anything else as its JSON text and every string inside it.
 */
export function secretKwargValues(secretNames: readonly string[] | undefined, kwargs: Record<string, unknown>): string[] {
  const values: string[] = [];
  const collect = (value: unknown): void => {
    if (typeof value === 'string') values.push(value);
    else if (Array.isArray(value)) value.forEach(collect);
    else if (value !== null && typeof value === 'object') Object.values(value).forEach(collect);
    else if (value !== undefined && value !== null) values.push(String(value));
  };
  for (const name of secretNames ?? []) if (Object.hasOwn(kwargs, name)) collect(kwargs[name]);
  return values;
}

/** `kwargs` with each field the trigger class declares secret replaced by MASK: what may be shown. */
export function redactKwargs(secretNames: readonly string[] | undefined, kwargs: Record<string, unknown>): Record<string, unknown> {
  if (!secretNames || secretNames.length === 0) return kwargs;
  return Object.fromEntries(Object.entries(kwargs).map(([name, value]) => [name, secretNames.includes(name) ? MASK : value]));
}
