// Every migration, in order: imported, not found by scanning the folder, so the compiled package
// (dist/migrations/*.js) runs the same list as the sources. Add a new numbered file here too; a
// test fails when a file in this folder is missing from the list.
import type { Kysely } from 'kysely';
import type { DialectAdapter } from '../src/database/dialect.ts';
import * as m0001 from './0001_initial.ts';
import * as m0002 from './0002_task_runtime.ts';
import * as m0003 from './0003_task_log.ts';
import * as m0004 from './0004_task_reschedule.ts';
import * as m0005 from './0005_signals.ts';
import * as m0006 from './0006_signal_actions.ts';
import * as m0007 from './0007_trigger_log.ts';
import * as m0008 from './0008_trigger_quarantine.ts';
import * as m0009 from './0009_next_event.ts';
import * as m0010 from './0010_claimable_trigger_index.ts';
import * as m0011 from './0011_encryption_key.ts';
import * as m0012 from './0012_signal_trigger_index.ts';
import * as m0013 from './0013_job_liveness_lock.ts';
import * as m0014 from './0014_task_state.ts';
import * as m0015 from './0015_trigger_member.ts';
import * as m0016 from './0016_human_input.ts';
import * as m0017 from './0017_queues.ts';
import * as m0018 from './0018_watchers.ts';
import * as m0019 from './0019_task_instance_history.ts';
import * as m0020 from './0020_audit_log.ts';
import * as m0021 from './0021_daemon_sample.ts';
import * as m0022 from './0022_signal_sender.ts';

export interface MigrationModule {
  up(db: Kysely<any>, adapter: DialectAdapter): Promise<void>;
}

export const MIGRATIONS: Readonly<Record<string, MigrationModule>> = {
  '0001_initial': m0001,
  '0002_task_runtime': m0002,
  '0003_task_log': m0003,
  '0004_task_reschedule': m0004,
  '0005_signals': m0005,
  '0006_signal_actions': m0006,
  '0007_trigger_log': m0007,
  '0008_trigger_quarantine': m0008,
  '0009_next_event': m0009,
  '0010_claimable_trigger_index': m0010,
  '0011_encryption_key': m0011,
  '0012_signal_trigger_index': m0012,
  '0013_job_liveness_lock': m0013,
  '0014_task_state': m0014,
  '0015_trigger_member': m0015,
  '0016_human_input': m0016,
  '0017_queues': m0017,
  '0018_watchers': m0018,
  '0019_task_instance_history': m0019,
  '0020_audit_log': m0020,
  '0021_daemon_sample': m0021,
  '0022_signal_sender': m0022,
};
