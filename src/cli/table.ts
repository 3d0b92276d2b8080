/**
 * A table as the CLI prints it for people: a header row, then one row per item, columns padded
 * to their widest cell and two spaces apart (the last column unpadded). A cell of several lines
 * (an import error's compiler message) keeps them in its own column. Scripts use --json.
 */
export function formatTable(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const split = rows.map((row) => row.map((cell) => cell.split('\n')));
  const widths = headers.map((header, column) =>
    Math.max(header.length, ...split.map((row) => Math.max(0, ...(row[column] ?? []).map((text) => text.length)))),
  );
  const line = (cells: readonly (readonly string[])[]) =>
    Array.from({ length: Math.max(1, ...cells.map((cell) => cell.length)) }, (_, at) =>
      cells
        .map((cell, column) => (column === cells.length - 1 ? (cell[at] ?? '') : (cell[at] ?? '').padEnd(widths[column]!)))
        .join('  ')
        .trimEnd(),
    ).join('\n');
  return `${[line(headers.map((header) => [header])), ...split.map(line)].join('\n')}\n`;
}

/**
 * What a list command prints: its rows as one JSON array with --json; `empty` (a sentence
 * saying there are none, and maybe how to make some) when there are none; else a table.
 */
export function printListing<Row>(
  rows: readonly Row[],
  listing: { readonly json: boolean | undefined; readonly empty: string; readonly headers: readonly string[]; readonly cells: (row: Row) => readonly string[] },
): void {
  if (listing.json) process.stdout.write(`${JSON.stringify(rows)}\n`);
  else if (rows.length === 0) process.stdout.write(`${listing.empty}\n`);
  else process.stdout.write(formatTable(listing.headers, rows.map(listing.cells)));
}
