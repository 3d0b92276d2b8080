import { InvalidOptionError } from '../../vocabulary/errors.ts';
import { nonNegativeSeconds, optionPicker, type RawOptions } from '../../vocabulary/options/option-table.ts';
import { tokenOption } from '../../vocabulary/options/tokens.ts';

/** The status page's own options (its address is the process's --http-host and --http-port). */
export const WEB_OPTIONS = {
  webToken: {
    env: 'DEFERFLOW_WEB_TOKEN',
    default: '',
    unit: 'text, 16 characters or more',
    describe:
      'The status page asks for it (a bearer token, or the password of basic auth with any user name); needed when --http-host is not a loopback address (prefer the env var: a flag shows in ps)',
  },
  webOperatorToken: {
    env: 'DEFERFLOW_WEB_OPERATOR_TOKEN',
    default: '',
    unit: 'text, 16 characters or more',
    describe:
      "The status page's operator role (trigger, clear, mark, pause, signal, respond) asks for it, as --web-token is asked for (basic auth's user name is recorded in the audit log); unset: the page is read-only",
  },
  webRefresh: {
    env: 'DEFERFLOW_WEB_REFRESH',
    default: 5,
    unit: 'seconds',
    describe: 'How often the status page reloads itself; 0: never',
  },
} as const;

export interface WebOptions {
  /** The viewer role's token; null: none asked (when openToViewers). */
  readonly token: string | null;
  /** The operator role's token; null: no actions. */
  readonly operatorToken: string | null;
  /** Whether the pages are shown without a token (no viewer token, on a loopback address). */
  readonly openToViewers: boolean;
  readonly refreshSeconds: number;
}

/** raw → defaulted → validated; refused when the page would be reachable from elsewhere without a token. */
export function resolveWebOptions(raw: RawOptions<typeof WEB_OPTIONS>, env: NodeJS.ProcessEnv, host: string): WebOptions {
  const pick = optionPicker(WEB_OPTIONS, raw, env);
  const token = tokenOption(pick('webToken'), 'webToken');
  const operatorToken = tokenOption(pick('webOperatorToken'), 'webOperatorToken');
  if (token === null && operatorToken === null && !isLoopback(host))
    throw new InvalidOptionError(
      'webToken',
      `the status page would be served on ${host}, beyond this machine, to anyone: set DEFERFLOW_WEB_TOKEN (or --web-token), or serve it on 127.0.0.1`,
    );
  if (token !== null && token === operatorToken)
    throw new InvalidOptionError(
      'webOperatorToken',
      'is the same as the web token: every viewer would be an operator; give the operator role a token of its own',
    );
  return Object.freeze({
    token,
    operatorToken,
    openToViewers: token === null && isLoopback(host),
    refreshSeconds: nonNegativeSeconds(pick('webRefresh'), 'webRefresh') / 1000,
  });
}

export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || host === '[::1]' || /^127(\.\d{1,3}){3}$/.test(host);
}
