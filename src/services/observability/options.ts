import { listenHost, listenPort, optionPicker, seconds, type RawOptions } from '../../vocabulary/options/option-table.ts';

/**
 * The options of the HTTP endpoint every long-running process can serve: /metrics (Prometheus)
 * and /health (and, in standalone and `deferflow web`, the status page). Each daemon's command
 * takes them; off by default for the separate daemons.
 */
export const HTTP_OPTIONS = {
  port: {
    flag: 'http-port',
    env: 'DEFERFLOW_HTTP_PORT',
    default: 'off',
    unit: 'port, 0 (any free one) or off',
    describe: 'Serve /metrics (Prometheus) and /health on this port; off: not served',
  },
  host: {
    flag: 'http-host',
    env: 'DEFERFLOW_HTTP_HOST',
    default: '127.0.0.1',
    unit: 'host or address',
    describe: 'Where /metrics and /health listen (0.0.0.0: every interface, e.g. for a Prometheus outside the host)',
  },
  healthLoopThreshold: {
    env: 'DEFERFLOW_HEALTH_LOOP_THRESHOLD',
    default: 10,
    unit: 'seconds',
    describe: '/health answers 503 once the event loop has been blocked this long (it is answered from a thread of its own)',
  },
} as const;

export interface ObservabilityHttpOptions {
  readonly host: string;
  /** 0: any free port. */
  readonly port: number;
  /** How long the event loop may go without a turn before /health fails. */
  readonly loopThresholdMs: number;
  /**
   * Whether a port already in use is only warned about (standalone's default port: a second
   * standalone still starts) instead of failing the start.
   */
  readonly optional: boolean;
}

/**
 * raw → defaulted → validated: null when the port is `off` (or empty). `defaultPort` replaces the
 * table's default (standalone serves by default); a fixed port that was only defaulted is optional.
 */
export function resolveObservabilityHttp(
  raw: RawOptions<typeof HTTP_OPTIONS>,
  env: NodeJS.ProcessEnv,
  defaultPort: number | 'off' = 'off',
): ObservabilityHttpOptions | null {
  const table = { ...HTTP_OPTIONS, port: { ...HTTP_OPTIONS.port, default: defaultPort } };
  const pick = optionPicker(table, raw, env);
  const port = pick('port');
  const portText = String(port ?? '')
    .trim()
    .toLowerCase();
  if (portText === 'off' || portText === '') return null;
  const given = raw.port !== undefined || (env[HTTP_OPTIONS.port.env] ?? '') !== '';
  return Object.freeze({
    host: listenHost(pick('host'), 'host'),
    port: listenPort(port, 'port'),
    loopThresholdMs: seconds(pick('healthLoopThreshold'), 'healthLoopThreshold'),
    optional: !given && defaultPort !== 0,
  });
}
