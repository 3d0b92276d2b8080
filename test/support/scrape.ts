/**
 * Reads a process's /metrics as Prometheus would, into samples a test can look up:
 *
 *   const metrics = await scrape(base);
 *   metrics.value('deferflow_triggers_failed_total', { classpath: 'test.ThrowingTrigger' }); // 1, or undefined when absent
 */
export class Samples {
  constructor(readonly byKey: ReadonlyMap<string, number>) {}

  /** The sample of `name` with exactly these labels; undefined when there is none. */
  value(name: string, labels: Record<string, string> = {}): number | undefined {
    return this.byKey.get(sampleKey(name, labels));
  }

  /** The sum of every sample of `name` whose labels include these (a counter over all classpaths, say); 0 when none. */
  sum(name: string, labels: Record<string, string> = {}): number {
    let total = 0;
    for (const [key, value] of this.byKey) {
      const [sampleName, rest = ''] = key.split('{');
      if (sampleName !== name) continue;
      if (Object.entries(labels).every(([label, wanted]) => rest.includes(`${label}=${JSON.stringify(wanted)}`))) total += value;
    }
    return total;
  }
}

function sampleKey(name: string, labels: Record<string, string>): string {
  const entries = Object.entries(labels).sort(([a], [b]) => a.localeCompare(b));
  return entries.length === 0 ? name : `${name}{${entries.map(([label, value]) => `${label}=${JSON.stringify(value)}`).join(',')}}`;
}

/** GET base/metrics and parse the text exposition; throws on any status but 200. */
export async function scrape(base: string): Promise<Samples> {
  const response = await fetch(`${base}/metrics`);
  const text = await response.text();
  if (response.status !== 200) throw new Error(`GET ${base}/metrics answered ${response.status}: ${text}`);
  const byKey = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!match) throw new Error(`not a Prometheus sample line: ${line}`);
    const labels = Object.fromEntries(
      [...(match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map(([, label, value]) => [label!, JSON.parse(`"${value}"`) as string]),
    );
    byKey.set(sampleKey(match[1]!, labels), Number(match[3]));
  }
  return new Samples(byKey);
}

/** GET base/health: its status and JSON body. */
export async function health(
  base: string,
): Promise<{ status: number; body: { status: string; failing: string[]; checks: Record<string, Record<string, unknown>> } }> {
  const response = await fetch(`${base}/health`);
  return { status: response.status, body: (await response.json()) as never };
}
