/**
 * HTML for the status page, written as tagged templates: every interpolated value is escaped
 * unless it is already `Html` (made by this tag), so nothing read from the database (a DAG id, a
 * log line) can inject markup.
 */
export class Html {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

type Part = Html | string | number | null | undefined | false | readonly Part[];

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

function render(part: Part): string {
  if (part === null || part === undefined || part === false) return '';
  if (part instanceof Html) return part.text;
  if (Array.isArray(part)) return part.map(render).join('');
  return escapeHtml(String(part));
}

export function html(strings: TemplateStringsArray, ...parts: Part[]): Html {
  let text = strings[0]!;
  parts.forEach((part, i) => {
    text += render(part) + strings[i + 1]!;
  });
  return new Html(text);
}

/** A link to a page of this site, its path segments percent-encoded and its query appended. */
export function href(segments: readonly (string | number)[], query: Record<string, string | number | undefined> = {}): string {
  const path = `/${segments.map((segment) => encodeURIComponent(String(segment))).join('/')}`;
  const search = Object.entries(query)
    .filter(([, value]) => value !== undefined)
    .map(([name, value]) => `${encodeURIComponent(name)}=${encodeURIComponent(String(value))}`)
    .join('&');
  return search === '' ? path : `${path}?${search}`;
}

export function isoMoment(ms: number | null): string {
  return ms === null
    ? ''
    : new Date(ms)
        .toISOString()
        .replace('T', ' ')
        .replace(/\.\d+Z$/, 'Z');
}

/** A state as a coloured badge (the colours Airflow's UI uses for the same states). */
export function stateBadge(state: string | null): Html {
  const name = state ?? 'none';
  return html`<span class="state state-${name}">${name}</span>`;
}

const STYLE = `
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2733;background:#f6f8fa}
header{background:#17324d;color:#fff;padding:10px 20px;display:flex;gap:22px;align-items:baseline;flex-wrap:wrap}
header b{font-size:17px} header a{color:#cfe3ff;text-decoration:none} header a.here{color:#fff;font-weight:600}
main{padding:16px 20px} h1{font-size:19px;margin:4px 0 12px} h2{font-size:16px;margin:18px 0 8px}
table{border-collapse:collapse;background:#fff;border:1px solid #d8dee4;min-width:50%}
th,td{padding:5px 10px;border-bottom:1px solid #e6eaef;text-align:left;vertical-align:top}
th{background:#eef2f6;font-weight:600} td.num{text-align:right;font-variant-numeric:tabular-nums}
a{color:#0b5cad} .muted{color:#66727f} .pager{margin:10px 0} .pager a{margin-right:14px}
.cell{display:inline-block;width:14px;height:14px;margin:1px;border-radius:3px;background:#d0d7de;vertical-align:middle}
.grid-wrap{overflow-x:auto} table.grid{min-width:0} .grid th,.grid td{padding:2px 4px;border-bottom:none} .grid th:first-child{padding-right:12px}
.timeline{background:#fff;border:1px solid #d8dee4;padding:8px 10px;max-width:1100px} .tl-axis{display:flex;justify-content:space-between;color:#66727f;font-size:12px;margin-left:160px}
.tl-row{display:flex;align-items:center;height:20px} .tl-label{width:160px;flex:none;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;font-size:13px}
.tl-legend{margin:6px 0 0 160px;font-size:12px;color:#66727f;display:flex;gap:12px;flex-wrap:wrap} .tl-track{position:relative;flex:1;height:14px;background:#f3f5f7} .tl-bar{position:absolute;top:0;height:14px;min-width:1px;background:#d0d7de}
.filter{margin:6px 0 10px} .filter select,.filter input,.filter button{font:inherit}
.state{display:inline-block;padding:0 7px;border-radius:9px;font-size:12px;color:#fff;background:#8a96a3}
.state-success{background:#2e8540}.state-failed,.state-upstream_failed{background:#c62828}.state-running{background:#2a9d8f}
.state-deferred{background:#7b4fd1}.state-awaiting_input{background:#1f6feb}.state-scheduled,.state-queued{background:#a0740b}.state-skipped{background:#e58cc4}
.state-up_for_retry,.state-up_for_reschedule{background:#d98324}.state-alive{background:#2e8540}.state-dead{background:#c62828}
.state-ended,.state-paused{background:#8a96a3} .cell.state-none{background:#eef2f6;border:1px dashed #b6c0ca}
pre.log{background:#0f1720;color:#dde6ee;padding:10px;overflow:auto;font:12px/1.5 ui-monospace,Menlo,monospace;white-space:pre-wrap}
pre.log .trigger{color:#c3a6ff} pre.log .warn{color:#ffd479} pre.log .error{color:#ff8a80}
.cards{display:flex;gap:12px;flex-wrap:wrap} .card{background:#fff;border:1px solid #d8dee4;padding:10px 14px;min-width:150px}
.card b{display:block;font-size:22px}
.charts{display:flex;flex-wrap:wrap;gap:12px} figure.chart{background:#fff;border:1px solid #d8dee4;margin:0;padding:8px 10px}
figure.chart figcaption{font-weight:600;margin-bottom:4px} svg text.axis{font-size:10px;fill:#66727f}
.legend{font-size:12px;color:#66727f;display:flex;gap:10px;flex-wrap:wrap;max-width:560px} .legend i{display:inline-block;width:14px;border-top:2px solid;margin-right:4px;vertical-align:middle} .legend i.dashed{border-top-style:dashed}
.who{margin-left:auto;color:#cfe3ff} .notice{background:#e6f4ea;border:1px solid #2e8540;padding:8px 14px;margin:0 0 14px}
form.action{display:inline-block;margin:0 6px 6px 0} .actions{margin:8px 0 14px}
.warning{background:#fff4e5;border:1px solid #e0a040;padding:8px 14px;margin:14px 0} .warning ul{margin:4px 0;padding-left:20px}
`;

const NAV: readonly [string, string][] = [
  ['/', 'Overview'],
  ['/deferred', 'Deferred'],
  ['/awaiting', 'Awaiting input'],
  ['/triggers', 'Triggers'],
  ['/daemons', 'Daemons'],
  ['/queues', 'Queues'],
  ['/charts', 'Charts'],
  ['/dags', 'DAGs'],
  ['/signals', 'Signals'],
  ['/audit', 'Audit'],
];

/** A whole page: the navigation, the content, and a refresh every `refreshSeconds` (0: none); `who`: the visitor, at the header's end. */
export function page(title: string, here: string, content: Html, refreshSeconds: number, who: Html | string = ''): string {
  return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
${refreshSeconds > 0 ? html`<meta http-equiv="refresh" content="${refreshSeconds}">` : ''}
<title>${title} · deferflow</title><style>${new Html(STYLE)}</style></head>
<body><header><b>deferflow</b>${NAV.map(([path, name]) => html`<a href="${path}"${new Html(path === here ? ' class="here"' : '')}>${name}</a>`)}
<span class="muted">updated ${isoMoment(Date.now())}</span>${who === '' ? '' : html`<span class="who">${who}</span>`}</header>
<main>${content}</main></body></html>
`.text;
}
