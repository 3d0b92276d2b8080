// The task-instance state machine is written out in src/storage/task-instance-state-machine.ts;
// every statement that changes a task instance's state must be one of its transitions.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { TASK_INSTANCE_STATES } from '../../src/database/schema.ts';
import { TASK_INSTANCE_TRANSITIONS } from '../../src/storage/task-instance-state-machine.ts';
import { REPO_ROOT } from '../support/processes.ts';

interface Statement {
  readonly where: string;
  readonly transition: string | null;
  /** State literals the statement sets (`null` for no state). */
  readonly sets: (string | null)[];
  /** State literals its WHERE requires. */
  readonly leaves: (string | null)[];
}

/** Every insert into or update of task_instance in src/ (all of them live in src/storage). */
function taskInstanceWrites(): Statement[] {
  const files = readdirSync(path.join(REPO_ROOT, 'src'), { recursive: true, encoding: 'utf8' }).filter((file) => file.endsWith('.ts'));
  return files.flatMap((file) => {
    const text = readFileSync(path.join(REPO_ROOT, 'src', file), 'utf8');
    const lines = text.split('\n');
    return lines.flatMap((line, index) => {
      if (!/\.(updateTable|insertInto)\('task_instance'\)/.test(line)) return [];
      const marker = /\/\/ transition: (\S+)/.exec(lines[index - 1] ?? '');
      // The statement: up to the call that runs it.
      const rest = lines.slice(index).join('\n');
      const statement = rest.slice(0, rest.search(/\.execute(TakeFirst|TakeFirstOrThrow)?\(/));
      const setBlock = /\.set\(\s*\{([\s\S]*?)\}\s*\)/.exec(statement)?.[1] ?? '';
      const sets = [...setBlock.matchAll(/(?:^|[\s,{])state: (?:'([a-z_]+)'|(null))/g)].map((match) => match[1] ?? null);
      const leaves = [
        ...[...statement.matchAll(/\.where\('state', '=', '([a-z_]+)'\)/g)].map((match) => match[1]!),
        ...[...statement.matchAll(/\.where\('state', 'in', \[([^\]]*)\]\)/g)].flatMap((match) =>
          [...match[1]!.matchAll(/'([a-z_]+)'/g)].map((state) => state[1]!),
        ),
        ...(/\.where\('state', 'is', null\)/.test(statement) ? [null] : []),
      ];
      return [{ where: `src/${file}:${index + 1}`, transition: marker?.[1] ?? null, sets, leaves }];
    });
  });
}

describe('the task-instance state machine', () => {
  const writes = taskInstanceWrites();
  const table = TASK_INSTANCE_TRANSITIONS as Record<string, { from: readonly (string | null)[] | 'any' | 'new'; to: readonly (string | null)[]; file: string }>;

  it('finds the statements it checks (the scan is not blind)', () => {
    expect(writes.length).toBeGreaterThanOrEqual(Object.keys(table).length);
    expect(writes.some((write) => write.leaves.length > 0 && write.sets.length > 0)).toBe(true);
  });

  it('lists every statement that writes a task instance, in the file that runs it', () => {
    const unlisted = writes.flatMap((write) => {
      if (write.transition === null) return [`${write.where}: no // transition: comment above it`];
      const row = table[write.transition];
      if (!row) return [`${write.where}: transition ${write.transition} is not in TASK_INSTANCE_TRANSITIONS`];
      return write.where.startsWith(`src/storage/${row.file}:`) ? [] : [`${write.where}: transition ${write.transition} belongs to src/storage/${row.file}`];
    });
    expect(unlisted).toEqual([]);
  });

  it('has each statement set and leave only the states its transition names', () => {
    const wrong = writes.flatMap((write) => {
      const row = write.transition === null ? undefined : table[write.transition];
      if (!row) return [];
      const badTargets = write.sets.filter((state) => !row.to.includes(state));
      const badSources = Array.isArray(row.from) ? write.leaves.filter((state) => !(row.from as readonly (string | null)[]).includes(state)) : write.leaves;
      return [
        ...badTargets.map((state) => `${write.where}: sets ${state}, not among ${write.transition}'s ${JSON.stringify(row.to)}`),
        ...badSources.map((state) => `${write.where}: leaves ${state}, not among ${write.transition}'s from`),
      ];
    });
    expect(wrong).toEqual([]);
  });

  it('lists no transition that no statement performs, and names only real states', () => {
    const performed = new Set(writes.map((write) => write.transition));
    expect(Object.keys(table).filter((name) => !performed.has(name))).toEqual([]);
    const known = new Set<string | null>([null, ...TASK_INSTANCE_STATES]);
    const unknown = Object.entries(table).flatMap(([name, row]) =>
      [...(Array.isArray(row.from) ? row.from : []), ...row.to].filter((state) => !known.has(state)).map((state) => `${name}: ${state}`),
    );
    expect(unknown).toEqual([]);
    // Every state is reachable, and every state but the finished ones can be left.
    const reached = new Set(Object.values(table).flatMap((row) => row.to));
    expect(TASK_INSTANCE_STATES.filter((state) => !reached.has(state))).toEqual([]);
  });
});
