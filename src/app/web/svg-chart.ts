import { Html, html } from './html.ts';

/*
 * Line charts drawn on the server as inline SVG: no script, no library, nothing fetched (a
 * console in a closed network draws them as well), and the page stays one HTML answer.
 */

/** One line: its points (epoch ms, value), oldest first. */
export interface ChartSeries {
  readonly label: string;
  readonly points: readonly (readonly [number, number])[];
  /** Drawn dashed: a limit (capacity, slots) rather than a measure. */
  readonly dashed?: boolean;
  /** Its colour's index in the palette (series of one daemon share it). */
  readonly colour: number;
}

const WIDTH = 560;
const HEIGHT = 150;
const LEFT = 44;
const BOTTOM = 18;
const TOP = 8;
const PALETTE = ['#0b5cad', '#c0392b', '#2e8540', '#7b4fd1', '#d98324', '#2a9d8f', '#8a6d3b', '#e58cc4'];

/** A point more than this many times the series' usual spacing after the last one starts a new line (the daemon was down). */
const GAP_FACTOR = 3;

/**
 * A chart of `series` over [from, to], its y axis from 0 to a round number at or above the
 * largest value. Each line carries data-series, data-points and data-last for tests and tools.
 */
export function lineChart(id: string, title: string, unit: string, series: readonly ChartSeries[], from: number, to: number): Html {
  const values = series.flatMap((line) => line.points.map(([, value]) => value));
  const top = roundUp(Math.max(1, ...values));
  const x = (at: number) => LEFT + ((at - from) / Math.max(1, to - from)) * (WIDTH - LEFT - 4);
  const y = (value: number) => TOP + (1 - value / top) * (HEIGHT - TOP - BOTTOM);
  const clock = (at: number) => new Date(at).toISOString().slice(11, 16);
  const lines = series.map((line) => {
    const colour = PALETTE[line.colour % PALETTE.length]!;
    const paths = segments(line.points).map((part) =>
      part.map(([at, value], i) => `${i === 0 ? 'M' : 'L'}${x(at).toFixed(1)},${y(value).toFixed(1)}`).join(' '),
    );
    const last = line.points.at(-1)?.[1];
    return html`<path d="${paths.join(' ')}" fill="none" stroke="${colour}" stroke-width="1.6"${new Html(line.dashed ? ' stroke-dasharray="5 4"' : '')} data-series="${line.label}" data-points="${line.points.length}" data-last="${last ?? ''}"><title>${line.label}${last === undefined ? '' : `: ${formatValue(last)} ${unit}`}</title></path>`;
  });
  return html`<figure class="chart" id="${id}"><figcaption>${title} <span class="muted">(${unit})</span></figcaption>
<svg viewBox="0 0 ${WIDTH} ${HEIGHT}" width="${WIDTH}" height="${HEIGHT}" role="img" aria-label="${title}">
<line x1="${LEFT}" y1="${TOP}" x2="${LEFT}" y2="${HEIGHT - BOTTOM}" stroke="#b6c0ca"/><line x1="${LEFT}" y1="${HEIGHT - BOTTOM}" x2="${WIDTH - 4}" y2="${HEIGHT - BOTTOM}" stroke="#b6c0ca"/>
<line x1="${LEFT}" y1="${TOP}" x2="${WIDTH - 4}" y2="${TOP}" stroke="#eef2f6"/>
<text x="${LEFT - 4}" y="${TOP + 8}" text-anchor="end" class="axis">${formatValue(top)}</text><text x="${LEFT - 4}" y="${HEIGHT - BOTTOM}" text-anchor="end" class="axis">0</text>
<text x="${LEFT}" y="${HEIGHT - 4}" class="axis">${clock(from)}</text><text x="${WIDTH - 4}" y="${HEIGHT - 4}" text-anchor="end" class="axis">${clock(to)} UTC</text>
${lines}</svg>
${
  series.length === 0
    ? html`<div class="muted">No samples in this window.</div>`
    : html`<div class="legend">${series.map((line) => html`<span><i style="border-color:${PALETTE[line.colour % PALETTE.length]!}"${new Html(line.dashed ? ' class="dashed"' : '')}></i>${line.label}</span>`)}</div>`
}</figure>`;
}

/** The points cut where a gap is much longer than the usual spacing. */
function segments(points: readonly (readonly [number, number])[]): (readonly [number, number])[][] {
  if (points.length < 2) return points.length === 0 ? [] : [[points[0]!]];
  const gaps = points
    .slice(1)
    .map(([at], i) => at - points[i]![0])
    .sort((a, b) => a - b);
  const usual = gaps[Math.floor(gaps.length / 2)]!;
  const parts: (readonly [number, number])[][] = [[points[0]!]];
  for (let i = 1; i < points.length; i++) {
    if (points[i]![0] - points[i - 1]![0] > GAP_FACTOR * usual) parts.push([]);
    parts.at(-1)!.push(points[i]!);
  }
  return parts;
}

/** 1, 2 or 5 times a power of ten, at or above `value`. */
function roundUp(value: number): number {
  const power = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 5, 10].map((step) => step * power).find((candidate) => candidate >= value)!;
}

function formatValue(value: number): string {
  return Number.isInteger(value) ? value.toLocaleString('en') : value.toFixed(value < 10 ? 2 : 1);
}
