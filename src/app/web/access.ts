import { createHmac } from 'node:crypto';
import { clientAddress, type HttpRequest } from '../../services/observability/http-server.ts';
import type { Actor } from '../../services/operator-actions.ts';
import { sameToken } from '../../vocabulary/options/tokens.ts';

/*
 * Who may do what on the status page. Two roles, each with its token, given as a bearer token
 * or as the password of basic auth (any user name; the operator's is recorded in the audit log):
 * - viewer: every page. With no viewer token on a loopback address, anyone on this machine.
 * - operator: every page and the actions (trigger, clear, mark, pause, signal, respond). Only
 *   with the operator token: never by being on this machine, so a page opened by another site
 *   in a local browser cannot act on its own.
 * Every action's form carries a CSRF token, an HMAC of the operator token: a browser sends basic
 * auth by itself, so a form another site posts would otherwise act; that site cannot know the
 * token. A request whose Origin is not this page's host is refused as well.
 */

export type Role = 'viewer' | 'operator';

/** Who is asking: the role, and the name given (basic auth's user name; 'operator' or 'viewer' without one). */
export interface Visitor {
  readonly role: Role;
  readonly name: string;
}

/** The name of the form field that carries the CSRF token. */
export const CSRF_FIELD = 'csrf';

export class WebAccess {
  readonly #viewerToken: Buffer | null;
  readonly #operatorToken: Buffer | null;
  readonly #openToViewers: boolean;
  /** The CSRF token of every operator form; null without an operator token. */
  readonly csrfToken: string | null;

  constructor(options: { readonly token: string | null; readonly operatorToken?: string | null; readonly openToViewers?: boolean }) {
    this.#viewerToken = options.token === null ? null : Buffer.from(options.token);
    this.#operatorToken = options.operatorToken ? Buffer.from(options.operatorToken) : null;
    // Without the option (an embedding that passes only a token): open when there is no token.
    this.#openToViewers = options.openToViewers ?? options.token === null;
    this.csrfToken = options.operatorToken ? createHmac('sha256', options.operatorToken).update('deferflow console forms').digest('base64url') : null;
  }

  /** Whether anyone may act here at all (an operator token is set). */
  get actionsEnabled(): boolean {
    return this.#operatorToken !== null;
  }

  /** The visitor a request's credentials make; null: refused (401). */
  visitorOf(request: HttpRequest): Visitor | null {
    const given = credentials(request.headers.authorization);
    if (this.#operatorToken !== null && sameToken(given.token, this.#operatorToken)) return { role: 'operator', name: given.name ?? 'operator' };
    if (this.#viewerToken !== null && sameToken(given.token, this.#viewerToken)) return { role: 'viewer', name: given.name ?? 'viewer' };
    return this.#openToViewers ? { role: 'viewer', name: 'anonymous' } : null;
  }

  /**
   * Why a form post may not act (null: it may): not an operator, a missing or wrong CSRF token,
   * or sent from another origin. The text is the refusal's message.
   */
  formRefusal(request: HttpRequest, visitor: Visitor, form: URLSearchParams): string | null {
    if (this.#operatorToken === null)
      return 'the status page is read-only: set DEFERFLOW_WEB_OPERATOR_TOKEN (or --web-operator-token) to allow actions, and sign in with it';
    if (visitor.role !== 'operator') return 'this needs the operator role: sign in with the operator token (basic auth, any user name, the token as password)';
    const origin = request.headers.origin;
    if (origin !== undefined && origin !== 'null' && request.headers.host !== undefined && hostOf(origin) !== request.headers.host)
      return `the form was sent from ${origin}, not from this page (${request.headers.host}): refused (CSRF)`;
    const given = form.get(CSRF_FIELD);
    if (given === null || !sameToken(given, Buffer.from(this.csrfToken!))) return 'the form has no valid CSRF token: reload the page and try again';
    return null;
  }

  /** The actor the audit log records for an operator's request: the name given, and the client's address (and the proxy's forward). */
  actorOf(request: HttpRequest, visitor: Visitor): Actor {
    return { name: visitor.name, source: 'web', address: clientAddress(request) };
  }
}

function credentials(header: string | undefined): { token: string | undefined; name: string | undefined } {
  const bearer = /^Bearer (.+)$/i.exec(header ?? '')?.[1];
  if (bearer !== undefined) return { token: bearer, name: undefined };
  const basic = /^Basic (.+)$/i.exec(header ?? '')?.[1];
  if (basic === undefined) return { token: undefined, name: undefined };
  const decoded = Buffer.from(basic, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  const name = decoded.slice(0, Math.max(0, colon)).trim();
  return { token: decoded.slice(colon + 1), name: name === '' ? undefined : name.slice(0, 100) };
}

function hostOf(origin: string): string | null {
  try {
    return new URL(origin).host;
  } catch {
    return null;
  }
}
