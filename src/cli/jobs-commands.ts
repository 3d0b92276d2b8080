import { numberFlag } from './declare-options.ts';
import type { Argv } from 'yargs';
import { positiveInteger } from '../vocabulary/options/option-table.ts';
import { JOB_TYPES, judgeJobs } from '../services/jobs/job-liveness.ts';
import { SCHEDULER_JOB_TYPE } from '../database/schema.ts';
import { DEFAULT_QUEUE } from '../model/queues.ts';
import type { LivenessLocks } from '../database/liveness-locks.ts';
import type { Database } from '../database/connect.ts';
import { COMMON_OPTIONS } from '../daemons/common-options.ts';
import { livenessThresholds } from '../daemons/liveness-options.ts';
import { withStorage } from './db-commands.ts';
import { printListing } from './table.ts';

/** `deferflow jobs list`: the triggerers, workers and schedulers a database has seen, alive or not. */
export function registerJobsCommands(cli: Argv): void {
  cli.command('jobs', 'Job commands: list, check, queues', (jobs) =>
    jobs
      .option('db', { type: 'string', describe: `${COMMON_OPTIONS.databaseUrl.describe} [env ${COMMON_OPTIONS.databaseUrl.env}]` })
      .command(
        'list',
        'List triggerer, worker and scheduler jobs, newest first, with their liveness judged as the daemons judge each other: liveness lock and heartbeat (a SIGKILLed process never ends its row)',
        (command) =>
          command
            .option('type', { type: 'string', choices: Object.keys(JOB_TYPES), describe: 'Only jobs of this kind' })
            .option('limit', numberFlag('integer', 'Most jobs listed', 25))
            .option('json', { type: 'boolean', describe: 'A JSON array instead of a table' }),
        async (args) => {
          const limit = positiveInteger(args.limit, 'limit');
          const thresholds = livenessThresholds();
          await withStorage(args.db, async (storage, database) => {
            const now = Date.now();
            const jobType = args.type === undefined ? undefined : JOB_TYPES[args.type as keyof typeof JOB_TYPES];
            const jobs = await storage.jobs.listJobs({ jobType, limit });
            const liveness = await judgeJobs(jobs, thresholds, now, await livenessLocks(database));
            const rows = jobs.map((job) => ({
              id: job.id,
              job_type: job.jobType,
              state: job.state,
              liveness: liveness.get(job.id)!,
              hostname: job.hostname,
              pid: job.pid,
              capacity: job.capacity,
              // What a worker or triggerer serves (a row from before queues served `default`).
              queues: job.jobType === SCHEDULER_JOB_TYPE ? null : (job.queues ?? DEFAULT_QUEUE),
              start_date: new Date(job.startDate).toISOString(),
              end_date: job.endDate === null ? null : new Date(job.endDate).toISOString(),
              latest_heartbeat: job.latestHeartbeat === null ? null : new Date(job.latestHeartbeat).toISOString(),
              heartbeat_age_s: job.latestHeartbeat === null ? null : Math.round((now - job.latestHeartbeat) / 100) / 10,
            }));
            printListing(rows, {
              json: args.json,
              empty: 'no jobs',
              headers: ['ID', 'TYPE', 'LIVENESS', 'STATE', 'HOST', 'PID', 'QUEUES', 'LAST HEARTBEAT', 'STARTED'],
              cells: (row) => [
                String(row.id),
                row.job_type,
                row.liveness,
                row.state,
                row.hostname,
                String(row.pid ?? '-'),
                row.queues ?? '-',
                row.heartbeat_age_s === null ? '-' : `${row.heartbeat_age_s} s ago`,
                row.start_date,
              ],
            });
          });
        },
      )
      .command(
        'check',
        'Exit 0 when a live job holds a fresh heartbeat, 1 otherwise (for orchestration probes, as airflow jobs check)',
        (command) =>
          command
            .option('job-type', { type: 'string', choices: Object.keys(JOB_TYPES), describe: 'Only jobs of this kind' })
            .option('hostname', { type: 'string', describe: 'Only jobs on this host (e.g. $(hostname) in a container probe)' })
            .option('limit', numberFlag('integer', 'How many running jobs, freshest heartbeat first, are looked at', 1))
            .option('allow-multiple', { type: 'boolean', default: false, describe: 'Pass with more than one live job (else more than one fails the check)' }),
        async (args) => {
          const limit = positiveInteger(args.limit, 'limit');
          const thresholds = livenessThresholds();
          await withStorage(args.db, async (storage, database) => {
            const now = Date.now();
            const jobType = args['job-type'] === undefined ? undefined : JOB_TYPES[args['job-type'] as keyof typeof JOB_TYPES];
            const running = await storage.jobs.listJobs({ jobType, hostname: args.hostname, runningOnly: true, limit });
            const liveness = await judgeJobs(running, thresholds, now, await livenessLocks(database));
            const alive = running.filter((job) => liveness.get(job.id) === 'alive');
            const what = `${args['job-type'] ?? 'job'}${args.hostname === undefined ? '' : ` on ${args.hostname}`}`;
            if (alive.length === 0) {
              process.stdout.write(
                `no live ${what} found (${running.length} running row(s) looked at, none alive: a fresh heartbeat and a held liveness lock)\n`,
              );
              process.exitCode = 1;
            } else if (alive.length > 1 && !args['allow-multiple']) {
              process.stdout.write(
                `found ${alive.length} live ${what}s (${alive.map((job) => `job ${job.id}`).join(', ')}); expected one (pass --allow-multiple)\n`,
              );
              process.exitCode = 1;
            } else {
              process.stdout.write(
                `found ${alive.length} live ${what}${alive.length === 1 ? '' : 's'} (${alive.map((job) => `job ${job.id} on host ${job.hostname}`).join(', ')})\n`,
              );
            }
            // Said, not failed: this probe is about the daemon; `jobs queues` fails on these.
            const { readQueueCoverage, unservedWork, describeUnserved } = await import('../services/jobs/queue-coverage.ts');
            const kind = { worker: 'task_instances', triggerer: 'triggers' }[args['job-type'] as string];
            for (const work of unservedWork(await readQueueCoverage(storage, await livenessLocks(database), thresholds, now)))
              if (kind === undefined || work.kind === kind) process.stdout.write(`warning: ${describeUnserved(work)}\n`);
          });
        },
      )
      .command(
        'queues',
        'List the queues with work or a live worker or triggerer serving them; exit 1 when work waits in a queue no live daemon serves',
        (command) => command.option('json', { type: 'boolean', describe: 'A JSON array instead of a table' }),
        async (args) => {
          const thresholds = livenessThresholds();
          await withStorage(args.db, async (storage, database) => {
            const { readQueueCoverage, unservedWork, describeUnserved } = await import('../services/jobs/queue-coverage.ts');
            const coverage = await readQueueCoverage(storage, await livenessLocks(database), thresholds, Date.now());
            const unserved = unservedWork(coverage);
            printListing(
              coverage.map((entry) => ({
                queue: entry.queue,
                scheduled_task_instances: entry.scheduledTaskInstances,
                live_workers: entry.liveWorkers,
                unowned_triggers: entry.unownedTriggers,
                live_triggerers: entry.liveTriggerers,
                unserved: unserved.filter((work) => work.queue === entry.queue).map((work) => work.kind),
              })),
              {
                json: args.json,
                empty: 'no queue has work or a live daemon',
                headers: ['QUEUE', 'SCHEDULED', 'LIVE WORKERS', 'UNCLAIMED TRIGGERS', 'LIVE TRIGGERERS', 'SERVED'],
                cells: (row) => [
                  row.queue,
                  String(row.scheduled_task_instances),
                  row.live_workers.length === 0 ? '-' : row.live_workers.join(','),
                  String(row.unowned_triggers),
                  row.live_triggerers.length === 0 ? '-' : row.live_triggerers.join(','),
                  row.unserved.length === 0 ? 'yes' : `NO (${row.unserved.join(', ')})`,
                ],
              },
            );
            if (unserved.length > 0) {
              if (!args.json) for (const work of unserved) process.stderr.write(`${describeUnserved(work)}\n`);
              process.exitCode = 1;
            }
          });
        },
      )
      .demandCommand(1, 'name a jobs command'),
  );
}

/** The liveness locks of `database`, loaded when a command reads them (--help loads no database code). */
async function livenessLocks(database: Database): Promise<LivenessLocks> {
  return (await import('../database/liveness-locks.ts')).livenessLocksOf(database);
}
