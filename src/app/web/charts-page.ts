import type { DaemonSample, Stores } from '../../storage/index.ts';
import { JOB_TYPES } from '../../services/jobs/job-liveness.ts';
import { type ChartSeries, lineChart } from './svg-chart.ts';
import { Html, html } from './html.ts';
import { groupBy } from '../../vocabulary/group-by.ts';

/** The most samples one page reads (a day of minute samples from 20 daemons fits). */
const MAX_SAMPLES = 50_000;

/** The windows offered, in hours. */
const WINDOWS = [0.25, 1, 3, 6, 12, 24] as const;

/**
 * GET /charts: the figures the daemons record of themselves (services/observability/daemon-samples.ts)
 * over the last hour (`?hours=` 0.25 to 24): per triggerer, triggers running against capacity,
 * events, failures and blocked-loop time per minute; the deployment's deferred task instances and
 * those awaiting input (as each scheduler counts them); per worker, slots in use against slots.
 */
export async function chartsPage(storage: Stores, hoursText: string | null, now = Date.now()): Promise<Html> {
  const hours = WINDOWS.find((window) => String(window) === hoursText) ?? 1;
  const from = now - hours * 3600_000;
  const samples = await storage.jobs.listDaemonSamples(from, MAX_SAMPLES);
  const of = (jobType: string) =>
    groupBy(
      samples.filter((sample) => sample.jobType === jobType),
      (sample) => sample.jobId,
    );
  const triggerers = of(JOB_TYPES.triggerer);
  const workers = of(JOB_TYPES.worker);
  const schedulers = of(JOB_TYPES.scheduler);
  const line = (
    jobs: Map<number, DaemonSample[]>,
    name: string,
    label: (jobId: number) => string,
    options: { perMinute?: boolean; dashed?: boolean } = {},
  ): ChartSeries[] =>
    [...jobs].map(([jobId, rows], i) => ({
      label: label(jobId),
      colour: i,
      dashed: options.dashed,
      points: rows
        .filter((row) => typeof row.figures[name] === 'number')
        .map((row) => {
          const value = row.figures[name]!;
          const interval = row.figures.interval_ms ?? 0;
          return [row.at, options.perMinute && interval > 0 ? (value * 60_000) / interval : value] as const;
        }),
    }));
  const named = (kind: string) => (jobId: number) => `${kind} ${jobId}`;
  const chart = (id: string, title: string, unit: string, series: ChartSeries[]) => lineChart(id, title, unit, series, from, now);
  return html`<h1>Charts</h1>
<form class="filter" method="get" action="/charts">Last <select name="hours">${WINDOWS.map((window) => html`<option value="${window}"${new Html(window === hours ? ' selected' : '')}>${window < 1 ? `${window * 60} min` : `${window} h`}</option>`)}</select> <button type="submit">Show</button>
<span class="muted">From the figures each daemon records every --sample-interval (a minute by default), kept a day.</span></form>
<h2>Waiting work</h2>
<div class="charts">
${chart('chart-deferred', 'Deferred task instances', 'task instances', line(schedulers, 'deferred', named('scheduler')))}
${chart('chart-awaiting', 'Awaiting input', 'task instances', line(schedulers, 'awaiting_input', named('scheduler')))}
</div>
<h2>Triggerers</h2>
<div class="charts">
${chart('chart-triggers', 'Triggers running, against capacity (dashed)', 'triggers', [
  ...line(triggerers, 'running', named('triggerer')),
  ...line(triggerers, 'capacity', (jobId) => `triggerer ${jobId} capacity`, { dashed: true }),
])}
${chart('chart-events', 'Events', 'per minute', line(triggerers, 'events', named('triggerer'), { perMinute: true }))}
${chart('chart-failures', 'Trigger failures', 'per minute', line(triggerers, 'failures', named('triggerer'), { perMinute: true }))}
${chart('chart-blocked', 'Event loop blocked by trigger steps', 'ms per minute', line(triggerers, 'blocked_ms', named('triggerer'), { perMinute: true }))}
</div>
<h2>Workers</h2>
<div class="charts">
${chart('chart-slots', 'Slots in use, against slots (dashed)', 'slots', [
  ...line(workers, 'slots_used', named('worker')),
  ...line(workers, 'slots', (jobId) => `worker ${jobId} slots`, { dashed: true }),
])}
</div>`;
}
