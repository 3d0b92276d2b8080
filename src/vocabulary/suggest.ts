/**
 * The known name a mistyped one most likely meant (`concurency` → `concurrency`), for refusals
 * of unknown options and flags, or one it is the tail of (`port` → `http-port`); null when none
 * is close enough to be worth saying. Compared
 * without regard to case, `-` or `_` (a flag's `poll-interval` is an option's `pollInterval`).
 */
export function closestName(given: string, known: Iterable<string>): string | null {
  const wanted = comparable(given);
  // Up to a third of the name may be wrong (one edit at least): closer names than that are
  // typos; farther ones are other words, and naming them would mislead (`--xy` is not `--db`).
  const limit = Math.max(1, Math.floor(wanted.length / 3));
  let best: string | null = null;
  let bestDistance = limit + 1;
  for (const name of known) {
    const distance = editDistance(wanted, comparable(name), bestDistance);
    if (distance < bestDistance) {
      best = name;
      bestDistance = distance;
    }
  }
  return best ?? tailOf(given, known);
}

/**
 * The one known name whose last dash-separated words are `given` (`port` → `http-port`): a flag
 * given without its prefix is no typo, but just as plainly meant. With two such names (`interval`
 * of `poll-interval` and `heartbeat-interval`), which one is not plain: none.
 */
function tailOf(given: string, known: Iterable<string>): string | null {
  const tail = `-${given.toLowerCase()}`;
  const matches = [...new Set(known)].filter((name) => name.toLowerCase().endsWith(tail));
  return matches.length === 1 ? matches[0]! : null;
}

function comparable(name: string): string {
  return name.toLowerCase().replace(/[-_]/g, '');
}

/**
 * Edits (insert, delete, substitute, swap two neighbours) from `a` to `b`; any value of `cap` or
 * more means "at least cap" (the caller needs nothing farther).
 */
function editDistance(a: string, b: string, cap: number): number {
  if (Math.abs(a.length - b.length) >= cap) return cap;
  // Three rows of the table: two back for a swap of neighbours, one back, this one.
  let twoBack = new Array<number>(b.length + 1).fill(0);
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  let current = new Array<number>(b.length + 1).fill(0);
  for (let i = 1; i <= a.length; i++) {
    current[0] = i;
    let rowBest = i;
    for (let j = 1; j <= b.length; j++) {
      const substitution = a[i - 1] === b[j - 1] ? 0 : 1;
      let cell = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + substitution);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) cell = Math.min(cell, twoBack[j - 2]! + 1);
      current[j] = cell;
      rowBest = Math.min(rowBest, cell);
    }
    if (rowBest >= cap) return cap;
    [twoBack, previous, current] = [previous, current, twoBack];
  }
  return Math.min(previous[b.length]!, cap);
}
