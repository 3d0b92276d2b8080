import { numberFlag } from './declare-options.ts';
import type { Argv } from 'yargs';
import type { Stores } from '../storage/index.ts';
import { formatTable } from './table.ts';
import os from 'node:os';
import { InvalidOptionError, NotAwaitingInputError } from '../vocabulary/errors.ts';
import { fieldValueFromText } from '../model/human-input.ts';
import { DEFAULT_PUBLIC_URL, WORKER_OPTIONS } from '../daemons/worker/options.ts';
import type { JsonObject } from '../vocabulary/serialization/json.ts';
import { COMMON_OPTIONS } from '../daemons/common-options.ts';
import { withStorage } from './db-commands.ts';

/** The options that name a DAG run, and a task instance of it, for every tasks command. */
const RUN_OPTION = { type: 'string', demandOption: true, describe: 'The run id' } as const;
const DAG_OPTION = { type: 'string', describe: 'The DAG id (needed only when two DAGs have runs of that id)' } as const;
const TASK_OPTION = { type: 'string', demandOption: true, describe: 'The task id' } as const;

/** `deferflow tasks list | clear | mark | logs | reschedules | state | input | respond`: the task instances of a DAG run. */
export function registerTasksCommands(cli: Argv): void {
  cli.command('tasks', 'Task instance commands: list, clear, mark, logs, reschedules, state, input, respond', (tasks) =>
    tasks
      .option('db', { type: 'string', describe: `${COMMON_OPTIONS.databaseUrl.describe} [env ${COMMON_OPTIONS.databaseUrl.env}]` })
      .command(
        'list',
        "List a DAG run's task instances",
        (command) =>
          command.option('run', RUN_OPTION).option('dag', DAG_OPTION).option('json', { type: 'boolean', describe: 'A JSON array instead of a table' }),
        async (args) => {
          await withStorage(args.db, async (storage) => {
            const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
            const taskInstances = await storage.taskInstances.taskInstancesOfRunId(args.run, args.dag);
            // Why the latest try failed, for a task that failed or waits to retry: its log's last error line.
            const errors = await storage.taskInstances.tryErrors(taskInstances.filter((ti) => ti.state === 'failed' || ti.state === 'up_for_retry'));
            const rows = taskInstances.map((ti) => ({
              dag_id: ti.dagId,
              task_id: ti.taskId,
              state: ti.state,
              try_number: ti.tryNumber,
              hostname: ti.hostname,
              start_date: iso(ti.startDate),
              end_date: iso(ti.endDate),
              next_method: ti.nextMethod,
              reschedules: ti.reschedules,
              error: errors.get(ti.id) ?? null,
            }));
            if (rows.length === 0)
              throw new InvalidOptionError('run', `no task instances of run ${JSON.stringify(args.run)}${args.dag ? ` of DAG ${args.dag}` : ''}`);
            if (args.json) {
              process.stdout.write(`${JSON.stringify(rows)}\n`);
              return;
            }
            process.stdout.write(
              formatTable(
                ['DAG ID', 'TASK ID', 'STATE', 'TRY', 'RESCHEDULES', 'HOST'],
                rows.map((row) => [row.dag_id, row.task_id, row.state ?? 'none', String(row.try_number), String(row.reschedules), row.hostname ?? '-']),
              ),
            );
          });
        },
      )
      .command(
        'clear',
        'Clear task instances so the scheduler runs them again; a deferred one stops waiting (its trigger is stopped, onKill runs)',
        (command) =>
          command
            .option('run', RUN_OPTION)
            .option('dag', DAG_OPTION)
            .option('task', { type: 'array', string: true, describe: 'Task ids to clear (repeatable; default: all of the run)' })
            .option('downstream', { type: 'boolean', describe: 'With --task: clear the tasks downstream of those too' })
            .option('keep-state', {
              type: 'boolean',
              describe: "Keep the task instances' durable state (context.state) for their next tries (default: it is deleted, so they start afresh)",
            }),
        async (args) => {
          const { OperatorActions, cliActor } = await import('../services/operator-actions.ts');
          await withStorage(args.db, async (_storage, database) => {
            const result = await new OperatorActions(database, cliActor()).clear({
              runId: args.run,
              dagId: args.dag,
              taskIds: args.task?.map(String),
              downstream: args.downstream === true,
              keepState: args.keepState === true,
            });
            process.stdout.write(`cleared ${result.cleared} task instance(s); stopped ${result.deletedTriggers} trigger(s)\n`);
          });
        },
      )
      .command(
        'mark',
        "Mark a task instance success or failed (Airflow's mark): a waiting one ends now, a running one is ended so by its worker",
        (command) =>
          command
            .option('run', RUN_OPTION)
            .option('task', TASK_OPTION)
            .option('dag', DAG_OPTION)
            .option('state', { type: 'string', choices: ['success', 'failed'] as const, demandOption: true, describe: 'The state it ends in' }),
        async (args) => {
          const { OperatorActions, cliActor } = await import('../services/operator-actions.ts');
          await withStorage(args.db, async (storage, database) => {
            const { ti, where } = await oneTaskInstance(storage, args.run, args.task, args.dag);
            const result = await new OperatorActions(database, cliActor()).mark(ti.id, args.state as 'success' | 'failed');
            process.stdout.write(
              result.marked
                ? `marked ${where} ${args.state}\n`
                : result.stopRequested
                  ? `${where} is running: its worker ends the try as ${args.state}\n`
                  : `${where} is already ${args.state}: nothing changed\n`,
            );
          });
        },
      )
      .command(
        'logs',
        "Print a task instance's log for one try (default: its latest), wherever it ran",
        (command) =>
          command
            .option('run', RUN_OPTION)
            .option('task', TASK_OPTION)
            .option('dag', DAG_OPTION)
            .option('try', numberFlag('integer', 'The try number (default: the latest)'))
            .option('json', { type: 'boolean', describe: 'One JSON object per line' }),
        async (args) => {
          await withStorage(args.db, async (storage) => {
            const { ti, where } = await oneTaskInstance(storage, args.run, args.task, args.dag);
            // A rescheduled try gives its number back, but its lines are logged under it. A task
            // started from its trigger waits (and resumes) under try 0: that wait is its first try.
            const loggedTries = await storage.logs.taskLogTries(ti.id);
            const latestTry = Math.max(ti.tryNumber, ...loggedTries);
            const firstTry = loggedTries.includes(0) ? 0 : 1;
            if (latestTry < firstTry) throw new InvalidOptionError('task', `${where} has not run yet: it has no log`);
            const tryNumber = args.try === undefined ? latestTry : Number(args.try);
            if (!Number.isInteger(tryNumber) || tryNumber < firstTry || tryNumber > latestTry) {
              throw new InvalidOptionError('try', `${where} has tries ${firstTry} to ${latestTry}, not ${args.try}`);
            }
            const lines = await storage.logs.readTaskLog(ti.id, tryNumber);
            if (lines.length === 0 && ti.hostname === null && ti.state !== 'deferred') {
              // A task started from its trigger and ended by it: the wait was its try, on the triggerer.
              throw new InvalidOptionError(
                'task',
                `${where} never ran on a worker: it was started and ended by its trigger (state ${ti.state ?? 'none'}), so it has no task log, and its trigger logged nothing`,
              );
            }
            if (lines.length === 0) {
              if (ti.state === 'deferred' && loggedTries.includes(tryNumber)) {
                process.stdout.write(`${where} is deferred; its trigger has logged nothing yet\n`);
                return;
              }
              const withLog = loggedTries.length > 0 ? ` (tries with a log: ${loggedTries.join(', ')})` : '';
              throw new InvalidOptionError('try', `${where} has no log for try ${tryNumber}${withLog}`);
            }
            for (const line of lines) {
              const fields = line.fieldsJson === null ? {} : (JSON.parse(line.fieldsJson) as Record<string, unknown>);
              const at = new Date(line.loggedAt).toISOString();
              // A trigger's lines say so: they are the wait's, written by the triggerer.
              const source = line.triggerId === null ? {} : { trigger_id: line.triggerId };
              if (args.json) {
                process.stdout.write(`${JSON.stringify({ time: at, level: line.level, msg: line.message, ...source, ...fields })}\n`);
                continue;
              }
              const { traceback, ...rest } = fields;
              const extra = Object.keys(rest).length > 0 ? ` ${JSON.stringify(rest)}` : '';
              const from = line.triggerId === null ? '' : `[trigger ${line.triggerId}] `;
              process.stdout.write(`${at} ${line.level.toUpperCase().padEnd(5)} ${from}${line.message}${extra}\n`);
              if (typeof traceback === 'string') process.stdout.write(`${traceback.replace(/^/gm, '    ')}\n`);
            }
          });
        },
      )
      .command(
        'reschedules',
        "Print a task instance's reschedules (a sensor in reschedule mode giving its slot back between pokes), oldest first",
        (command) =>
          command
            .option('run', RUN_OPTION)
            .option('task', TASK_OPTION)
            .option('dag', DAG_OPTION)
            .option('json', { type: 'boolean', describe: 'A JSON array instead of a table' }),
        async (args) => {
          await withStorage(args.db, async (storage) => {
            const { ti } = await oneTaskInstance(storage, args.run, args.task, args.dag);
            const iso = (ms: number) => new Date(ms).toISOString();
            const rows = (await storage.taskInstances.taskReschedules(ti.id, null)).map((r) => ({
              try_number: r.tryNumber,
              start_date: iso(r.startDate),
              end_date: iso(r.endDate),
              reschedule_date: iso(r.rescheduleDate),
            }));
            if (args.json) {
              process.stdout.write(`${JSON.stringify(rows)}\n`);
              return;
            }
            process.stdout.write(
              `${rows.length} reschedule(s) of ${ti.dagId}.${ti.taskId} (run ${args.run}), now ${ti.state ?? 'in no state'}, try ${ti.tryNumber}\n`,
            );
            if (rows.length === 0) return;
            process.stdout.write(
              formatTable(
                ['TRY', 'POKE STARTED', 'POKE ENDED', 'NEXT POKE AT'],
                rows.map((row) => [String(row.try_number), row.start_date, row.end_date, row.reschedule_date]),
              ),
            );
          });
        },
      )
      .command(
        'state',
        "Print a task instance's durable state (what its code kept with context.state), by key",
        (command) =>
          command
            .option('run', RUN_OPTION)
            .option('task', TASK_OPTION)
            .option('dag', DAG_OPTION)
            .option('json', { type: 'boolean', describe: 'One JSON object of every key and its value' }),
        async (args) => {
          await withStorage(args.db, async (storage) => {
            const { ti, where } = await oneTaskInstance(storage, args.run, args.task, args.dag);
            const entries = await storage.taskInstances.listTaskState(ti.id);
            if (args.json) {
              process.stdout.write(`${JSON.stringify(Object.fromEntries(entries.map((entry) => [entry.key, JSON.parse(entry.json)])))}\n`);
              return;
            }
            process.stdout.write(`${entries.length} key(s) of ${where}'s state, now ${ti.state ?? 'in no state'}, try ${ti.tryNumber}\n`);
            if (entries.length === 0) return;
            process.stdout.write(
              formatTable(
                ['KEY', 'VALUE', 'WRITTEN BY TRY', 'AT'],
                entries.map((entry) => [entry.key, entry.json, String(entry.tryNumber), new Date(entry.updatedAt).toISOString()]),
              ),
            );
          });
        },
      )
      .command(
        'input',
        "Print a task instance's question to a person (human input), its signed link and its response",
        (command) =>
          command
            .option('run', RUN_OPTION)
            .option('task', TASK_OPTION)
            .option('dag', DAG_OPTION)
            .option('public-url', { type: 'string', describe: `Where people reach the status page, for the link [env ${WORKER_OPTIONS.publicUrl.env}]` })
            .option('json', { type: 'boolean', describe: 'One JSON object' }),
        async (args) => {
          await withStorage(args.db, async (storage) => {
            const { ti, where, inputs, input } = await askedQuestion(storage, args.run, args.task, args.dag);
            const asked = { taskInstanceId: ti.id, tryNumber: input.tryNumber, nonce: input.nonce, timeoutAt: input.timeoutAt };
            const publicUrl = args.publicUrl ?? process.env[WORKER_OPTIONS.publicUrl.env] ?? DEFAULT_PUBLIC_URL;
            const link = ti.state === 'awaiting_input' || (ti.state === 'running' && input.response === null) ? await inputs.linkFor(asked, publicUrl) : null;
            if (args.json) {
              process.stdout.write(
                `${JSON.stringify({ state: ti.state, question: input.question, timeout_at: input.timeoutAt === null ? null : new Date(input.timeoutAt).toISOString(), link, response: input.response })}\n`,
              );
              return;
            }
            const { question } = input;
            const lines = [
              `${where}, ${ti.state ?? 'in no state'}: ${question.subject}`,
              ...(question.body ? [question.body] : []),
              ...(question.options.length > 0 ? [`options${question.multiple ? ' (several may be chosen)' : ''}: ${question.options.join(', ')}`] : []),
              ...question.fields.map(
                (field) =>
                  `field ${field.name} (${field.type}${field.choices ? `: ${field.choices.join(', ')}` : ''}${field.default !== undefined ? `, default ${JSON.stringify(field.default)}` : ''})`,
              ),
              `timeout: ${input.timeoutAt === null ? 'none' : new Date(input.timeoutAt).toISOString()}${question.defaults ? ` (then the defaults answer: ${JSON.stringify(question.defaults)})` : ''}`,
              input.response
                ? `answered by ${input.response.by} at ${input.response.at} (${input.response.source}): ${JSON.stringify({ chosen: input.response.chosen, values: input.response.values })}`
                : `not answered yet${link ? `; link: ${link}` : ''}`,
            ];
            process.stdout.write(`${lines.join('\n')}\n`);
          });
        },
      )
      .command(
        'respond',
        "Answer a task instance's question to a person (human input); the first response wins",
        (command) =>
          command
            .option('run', RUN_OPTION)
            .option('task', TASK_OPTION)
            .option('dag', DAG_OPTION)
            .option('choose', { type: 'string', array: true, describe: 'An option to choose (repeat for several)' })
            .option('field', { type: 'string', array: true, describe: 'A form field, as name=value (repeat for each)' })
            .option('by', { type: 'string', describe: 'Who responds (recorded with the response)', default: os.userInfo().username })
            .option('json', { type: 'boolean', describe: 'Print the recorded response as JSON' }),
        async (args) => {
          await withStorage(args.db, async (storage, database) => {
            const { ti, where, input } = await askedQuestion(storage, args.run, args.task, args.dag);
            const values: JsonObject = {};
            for (const pair of args.field ?? []) {
              const at = pair.indexOf('=');
              if (at <= 0) throw new InvalidOptionError('field', `expected name=value, got ${JSON.stringify(pair)}`);
              const value = fieldValueFromText(input.question, pair.slice(0, at), pair.slice(at + 1));
              if (value !== undefined) values[pair.slice(0, at)] = value;
            }
            const { OperatorActions, cliActor } = await import('../services/operator-actions.ts');
            const response = await new OperatorActions(database, { ...cliActor(), name: args.by }).respond(ti.id, { chosen: args.choose ?? [], values });
            if (args.json) {
              process.stdout.write(`${JSON.stringify(response)}\n`);
              return;
            }
            process.stdout.write(
              `answered ${where} as ${response.by}: ${JSON.stringify({ chosen: response.chosen, values: response.values })}; it resumes on the next free worker slot\n`,
            );
          });
        },
      )
      .demandCommand(1, 'name a tasks command'),
  );
}

/** The one task instance of a run with this task id; refuses, naming the fix, none or several (by DAG). */
async function oneTaskInstance(storage: Stores, runId: string, taskId: string, dagId: string | undefined) {
  const ofRun = await storage.taskInstances.taskInstancesOfRunId(runId, dagId);
  const ofDag = dagId ? ` of DAG ${dagId}` : '';
  if (ofRun.length === 0) throw new InvalidOptionError('run', `no task instances of run ${JSON.stringify(runId)}${ofDag}`);
  const found = ofRun.filter((ti) => ti.taskId === taskId);
  if (found.length === 0) {
    const taskIds = [...new Set(ofRun.map((ti) => ti.taskId))];
    throw new InvalidOptionError('task', `run ${JSON.stringify(runId)}${ofDag} has no task ${taskId} (its tasks: ${taskIds.join(', ')})`);
  }
  const where = `task ${taskId} of run ${JSON.stringify(runId)}${ofDag}`;
  if (found.length > 1)
    throw new InvalidOptionError('dag', `${found.length} DAGs have a ${where} (${found.map((ti) => ti.dagId).join(', ')}): name one with --dag`);
  return { ti: found[0]!, where };
}

/** A task instance's question to a person, with the service that answers it (loaded with the command: --help loads no storage code); refused when it asks none. */
async function askedQuestion(storage: Stores, runId: string, taskId: string, dagId: string | undefined) {
  const { ti, where } = await oneTaskInstance(storage, runId, taskId, dagId);
  const { InputService } = await import('../services/human-input/input-service.ts');
  const inputs = new InputService(storage);
  const input = await inputs.question(ti.id);
  if (!input) throw new NotAwaitingInputError(`${where} asks no question (it is ${ti.state ?? 'in no state'})`);
  return { ti, where, inputs, input };
}
