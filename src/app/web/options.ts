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
  webRefresh: {
    env: 'DEFERFLOW_WEB_REFRESH',
    default: 5,
    unit: 'seconds',
    describe: 'How often the status page reloads itself; 0: never',
  },
} as const;

export interface WebOptions {
  readonly token: string | null;
  readonly refreshSeconds: number;
}

/** raw → defaulted → validated; refused when the page would be reachable from elsewhere without a token. */
export function resolveWebOptions(raw: RawOptions<typeof WEB_OPTIONS>, env: NodeJS.ProcessEnv, host: string): WebOptions {
  const pick = optionPicker(WEB_OPTIONS, raw, env);
  const token = tokenOption(pick('webToken'), 'webToken');
  if (token === null && !isLoopback(host))
    throw new InvalidOptionError(
      'webToken',
      `the status page would be served on ${host}, beyond this machine, to anyone: set DEFERFLOW_WEB_TOKEN (or --web-token), or serve it on 127.0.0.1`,
    );
  return Object.freeze({ token, refreshSeconds: nonNegativeSeconds(pick('webRefresh'), 'webRefresh') / 1000 });
}

export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || host === '[::1]' || /^127(\.\d{1,3}){3}$/.test(host);
}
