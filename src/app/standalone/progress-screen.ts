/**
 * The terminal standalone shows a run on: its progress line stays the last line, redrawn in
 * place, and everything else printed meanwhile (its log lines, its own messages) goes above it.
 * Without it, a log line written while the progress line is drawn would land inside it.
 * Used only when both stdout and stderr are a terminal (the same one, as a person runs it).
 */
export class ProgressScreen {
  /** The progress line drawn now; '' when none is. */
  #line = '';

  constructor(
    private readonly out: NodeJS.WriteStream = process.stdout,
    private readonly err: NodeJS.WriteStream = process.stderr,
  ) {}

  /** Draws (or redraws) the progress line in place. */
  draw(line: string): void {
    this.#line = line;
    this.out.write(`\r${line}\x1b[K`);
  }

  /** Draws the progress line a last time and leaves it, moving below it. */
  leave(line: string): void {
    this.#line = '';
    this.out.write(`\r${line}\x1b[K\n`);
  }

  /** Prints `text` (one or more lines) above the progress line, on stdout or stderr. */
  above(text: string, stream: 'out' | 'err' = 'out'): void {
    if (this.#line !== '') this.out.write('\r\x1b[K');
    (stream === 'out' ? this.out : this.err).write(text.endsWith('\n') ? text : `${text}\n`);
    if (this.#line !== '') this.out.write(this.#line);
  }
}
