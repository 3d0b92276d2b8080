// The status page's server-drawn charts: a line breaks where its daemon was silent, the y axis
// ends at a round number at or above the largest value, a limit is dashed, and a chart with no
// samples says so.
import { describe, expect, it } from 'vitest';
import { lineChart } from '../../src/app/web/svg-chart.ts';

describe('lineChart', () => {
  it('draws each series as a path that breaks at a long gap, on an axis up to a round number', () => {
    const minute = 60_000;
    const at = (m: number) => 1_000_000_000_000 + m * minute;
    const chart = lineChart(
      'c',
      'Triggers',
      'triggers',
      [
        { label: 'running', colour: 0, points: [0, 1, 2, 10, 11].map((m) => [at(m), 30 + m] as const) },
        { label: 'capacity', colour: 0, dashed: true, points: [[at(0), 35] as const] },
      ],
      at(0),
      at(12),
    ).text;
    const path = /<path d="([^"]+)"[^>]*data-series="running"[^>]*data-points="5" data-last="41"/.exec(chart);
    expect(path).not.toBeNull();
    // Minutes 2 → 10 is more than three usual spacings: a new line starts there.
    expect(path![1]!.match(/M/g)).toHaveLength(2);
    expect(chart).toMatch(/<path [^>]*stroke-dasharray="5 4" data-series="capacity"/);
    expect(chart).toContain('class="axis">50</text>');
    expect(chart).not.toContain('No samples');
  });

  it('says when there is nothing to draw', () => {
    expect(lineChart('c', 'Events', 'per minute', [], 0, 60_000).text).toContain('No samples in this window.');
  });
});
