/**
 * A table as the CLI prints it for people: a header row, then one row per item, columns padded
 * to their widest cell and two spaces apart (the last column unpadded). Scripts use --json.
 */
export function formatTable(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = headers.map((header, column) => Math.max(header.length, ...rows.map((row) => (row[column] ?? '').length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, column) => (column === cells.length - 1 ? cell : cell.padEnd(widths[column]!)))
      .join('  ')
      .trimEnd();
  return `${[line(headers), ...rows.map(line)].join('\n')}\n`;
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
