import { numberFlag } from './declare-options.ts';
import type { Argv } from 'yargs';
import { COMMON_OPTIONS } from '../daemons/common-options.ts';
import { positiveInteger } from '../vocabulary/options/option-table.ts';
import { withStorage } from './db-commands.ts';
import { printListing } from './table.ts';

/** Task instances named per trigger in the listing (the count says how many wait in all). */
const NAMED_PER_TRIGGER = 3;

/** `deferflow triggers list`: what is being waited on, by whom, for how long. Never the kwargs: they may hold secrets. */
export function registerTriggersCommands(cli: Argv): void {
  cli.command('triggers', 'Trigger commands: list', (triggers) =>
    triggers
      .option('db', { type: 'string', describe: `${COMMON_OPTIONS.databaseUrl.describe} [env ${COMMON_OPTIONS.databaseUrl.env}]` })
      .command(
        'list',
        'List triggers, oldest first, with their classpath, the triggerer running them, their age and the task instances waiting on them',
        (command) =>
          command
            .option('triggerer', { type: 'string', describe: 'Only the triggers of this triggerer job id' })
            .option('limit', numberFlag('integer', 'Most triggers listed', 50))
            .option('json', { type: 'boolean', describe: 'A JSON array instead of a table' }),
        async (args) => {
          const limit = positiveInteger(args.limit, 'limit');
          const triggererId = args.triggerer === undefined ? undefined : positiveInteger(args.triggerer, 'triggerer');
          await withStorage(args.db, async (storage) => {
            const now = Date.now();
            const rows = (await storage.triggers.listTriggers({ limit, triggererId, perTrigger: NAMED_PER_TRIGGER })).map((trigger) => ({
              id: trigger.id,
              classpath: trigger.classpath,
              triggerer_id: trigger.triggererId,
              triggerer_host: trigger.triggererHost,
              created_at: new Date(trigger.createdAt).toISOString(),
              age_s: Math.round((now - trigger.createdAt) / 100) / 10,
              task_instance_count: trigger.taskInstanceCount,
              task_instances: trigger.taskInstances.map((ti) => ({ id: ti.id, dag_id: ti.dagId, task_id: ti.taskId, run_id: ti.runId })),
              member_of: trigger.memberOf,
            }));
            printListing(rows, {
              json: args.json,
              empty: 'no triggers',
              headers: ['ID', 'CLASSPATH', 'TRIGGERER', 'AGE', 'TASK INSTANCES'],
              cells: (row) => [
                String(row.id),
                row.classpath,
                row.triggerer_id === null ? 'unowned' : `${row.triggerer_id} on ${row.triggerer_host ?? '?'}`,
                `${row.age_s} s`,
                waitingCell(row),
              ],
            });
          });
        },
      )
      .demandCommand(1, 'name a triggers command'),
  );
}

/** Who waits on a listed trigger: its task instances (the first few named), and the composite waits it is a member of. */
function waitingCell(row: {
  task_instance_count: number;
  task_instances: readonly { dag_id: string; task_id: string; run_id: string }[];
  member_of: readonly number[];
}): string {
  const named = row.task_instances.map((ti) => `${ti.dag_id}.${ti.task_id} (${ti.run_id})`).join(', ');
  const more = row.task_instance_count > row.task_instances.length ? ', …' : '';
  const waiting = named === '' ? `${row.task_instance_count}` : `${row.task_instance_count}: ${named}${more}`;
  return row.member_of.length > 0 ? `${waiting}; member of composite ${row.member_of.join(', ')}` : waiting;
}
