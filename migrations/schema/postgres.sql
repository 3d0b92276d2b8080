table audit_log
  column id bigint not null identity
  column at timestamp with time zone not null
  column actor text not null
  column source text not null
  column address text
  column action text not null
  column dag_id text
  column run_id text
  column task_instance_id bigint
  column details text not null
  column outcome text not null
  constraint audit_log_pkey PRIMARY KEY (id)
  constraint audit_log_source_check CHECK ((source = ANY (ARRAY['web'::text, 'cli'::text, 'link'::text])))
  index CREATE INDEX audit_log_at_idx ON audit_log USING btree (at)
  index CREATE UNIQUE INDEX audit_log_pkey ON audit_log USING btree (id)
table daemon_sample
  column id bigint not null identity
  column job_id bigint not null
  column job_type text not null
  column at timestamp with time zone not null
  column figures text not null
  constraint daemon_sample_pkey PRIMARY KEY (id)
  index CREATE INDEX daemon_sample_at_idx ON daemon_sample USING btree (at)
  index CREATE UNIQUE INDEX daemon_sample_pkey ON daemon_sample USING btree (id)
table dag_run
  column id bigint not null identity
  column dag_id text not null
  column run_id text not null
  column run_type text not null
  column logical_date timestamp with time zone not null
  column data_interval_start timestamp with time zone
  column data_interval_end timestamp with time zone
  column state text not null
  column conf jsonb not null
  column dag_hash text
  column created_at timestamp with time zone not null
  column start_date timestamp with time zone
  column end_date timestamp with time zone
  column updated_at timestamp with time zone not null
  constraint dag_run_logical_date_key UNIQUE (dag_id, logical_date)
  constraint dag_run_pkey PRIMARY KEY (id)
  constraint dag_run_run_id_key UNIQUE (dag_id, run_id)
  constraint dag_run_run_type_check CHECK ((run_type = ANY (ARRAY['manual'::text, 'scheduled'::text, 'event'::text])))
  constraint dag_run_state_check CHECK ((state = ANY (ARRAY['queued'::text, 'running'::text, 'success'::text, 'failed'::text])))
  index CREATE UNIQUE INDEX dag_run_logical_date_key ON dag_run USING btree (dag_id, logical_date)
  index CREATE UNIQUE INDEX dag_run_pkey ON dag_run USING btree (id)
  index CREATE UNIQUE INDEX dag_run_run_id_key ON dag_run USING btree (dag_id, run_id)
  index CREATE INDEX dag_run_unfinished_idx ON dag_run USING btree (state, dag_id) WHERE (state = ANY (ARRAY['queued'::text, 'running'::text]))
table dag_signal_start
  column dag_id text not null
  column signal_key text not null
  column after_version bigint not null
  constraint dag_signal_start_after_version_check CHECK ((after_version >= 0))
  constraint dag_signal_start_pkey PRIMARY KEY (dag_id)
  index CREATE UNIQUE INDEX dag_signal_start_pkey ON dag_signal_start USING btree (dag_id)
table dag_watcher
  column dag_id text not null
  column trigger_id bigint not null
  constraint dag_watcher_pkey PRIMARY KEY (dag_id, trigger_id)
  index CREATE UNIQUE INDEX dag_watcher_pkey ON dag_watcher USING btree (dag_id, trigger_id)
  index CREATE INDEX dag_watcher_trigger_idx ON dag_watcher USING btree (trigger_id)
table deferflow_secret
  column name text not null
  column value text not null
  column created_at timestamp with time zone not null
  constraint deferflow_secret_pkey PRIMARY KEY (name)
  index CREATE UNIQUE INDEX deferflow_secret_pkey ON deferflow_secret USING btree (name)
table encryption_key
  column key_id text not null
  column check_value text not null
  column recorded_at timestamp with time zone not null
  constraint encryption_key_pkey PRIMARY KEY (key_id)
  index CREATE UNIQUE INDEX encryption_key_pkey ON encryption_key USING btree (key_id)
table import_error
  column id bigint not null identity
  column fileloc text not null
  column message text not null
  column created_at timestamp with time zone not null
  constraint import_error_fileloc_key UNIQUE (fileloc)
  constraint import_error_pkey PRIMARY KEY (id)
  index CREATE UNIQUE INDEX import_error_fileloc_key ON import_error USING btree (fileloc)
  index CREATE UNIQUE INDEX import_error_pkey ON import_error USING btree (id)
table job
  column id bigint not null identity
  column job_type text not null
  column state text not null
  column hostname text not null
  column pid integer not null
  column capacity integer
  column start_date timestamp with time zone not null
  column end_date timestamp with time zone
  column latest_heartbeat timestamp with time zone not null
  column liveness_lock text
  column queues text
  constraint job_pkey PRIMARY KEY (id)
  constraint job_state_check CHECK ((state = ANY (ARRAY['running'::text, 'success'::text, 'failed'::text])))
  index CREATE UNIQUE INDEX job_pkey ON job USING btree (id)
  index CREATE INDEX job_type_heartbeat_idx ON job USING btree (job_type, latest_heartbeat)
table serialized_dag
  column dag_id text not null
  column fileloc text not null
  column data jsonb not null
  column hash text not null
  column schema_version integer not null
  column last_updated timestamp with time zone not null
  column deleted_at timestamp with time zone
  column paused integer not null default 0
  constraint serialized_dag_pkey PRIMARY KEY (dag_id)
  index CREATE UNIQUE INDEX serialized_dag_pkey ON serialized_dag USING btree (dag_id)
table signal
  column key text not null
  column version bigint not null
  column value jsonb not null
  column sent_at timestamp with time zone not null
  column sent_by text
  constraint signal_pkey PRIMARY KEY (key, version)
  constraint signal_version_check CHECK ((version >= 1))
  index CREATE UNIQUE INDEX signal_pkey ON signal USING btree (key, version)
  index CREATE INDEX signal_sent_at_idx ON signal USING btree (sent_at)
table signal_key
  column key text not null
  column version bigint not null
  column updated_at timestamp with time zone not null
  constraint signal_key_pkey PRIMARY KEY (key)
  constraint signal_key_version_check CHECK ((version >= 1))
  index CREATE UNIQUE INDEX signal_key_pkey ON signal_key USING btree (key)
table task_input
  column task_instance_id bigint not null
  column try_number integer not null
  column nonce text not null
  column question jsonb not null
  column asked_at timestamp with time zone not null
  column timeout_at timestamp with time zone
  column responded_at timestamp with time zone
  column responded_by text
  column response_source text
  column response jsonb
  constraint task_input_pkey PRIMARY KEY (task_instance_id)
  constraint task_input_response_source_check CHECK ((response_source = ANY (ARRAY['link'::text, 'cli'::text, 'http'::text, 'api'::text, 'page'::text, 'timeout'::text])))
  constraint task_input_task_instance_id_fkey FOREIGN KEY (task_instance_id) REFERENCES task_instance(id) ON DELETE CASCADE
  index CREATE UNIQUE INDEX task_input_pkey ON task_input USING btree (task_instance_id)
table task_instance
  column id bigint not null identity
  column dag_id text not null
  column task_id text not null
  column run_id text not null
  column map_index integer not null default '-1'::integer
  column try_number integer not null default 0
  column state text
  column next_method text
  column next_kwargs jsonb
  column trigger_id bigint
  column trigger_timeout timestamp with time zone
  column priority_weight integer not null default 1
  column start_date timestamp with time zone
  column end_date timestamp with time zone
  column updated_at timestamp with time zone
  column operator text
  column max_tries integer not null default 0
  column ready_at timestamp with time zone
  column execution_deadline timestamp with time zone
  column queued_at timestamp with time zone
  column hostname text
  column pid integer
  column worker_job_id bigint
  column return_value jsonb
  column stop_request text
  column next_event jsonb
  column queue text not null default 'default'::text
  constraint task_instance_key UNIQUE (dag_id, run_id, task_id, map_index)
  constraint task_instance_pkey PRIMARY KEY (id)
  constraint task_instance_state_check CHECK ((state = ANY (ARRAY['scheduled'::text, 'queued'::text, 'running'::text, 'deferred'::text, 'success'::text, 'failed'::text, 'up_for_retry'::text, 'up_for_reschedule'::text, 'skipped'::text, 'upstream_failed'::text, 'awaiting_input'::text])))
  constraint task_instance_stop_request_check CHECK (((stop_request IS NULL) OR ((stop_request = ANY (ARRAY['restart'::text, 'success'::text, 'failed'::text, 'skipped'::text])) AND (state = 'running'::text))))
  constraint task_instance_trigger_id_fkey FOREIGN KEY (trigger_id) REFERENCES trigger(id)
  constraint task_instance_trigger_only_when_deferred CHECK (((trigger_id IS NULL) OR COALESCE((state = 'deferred'::text), false)))
  index CREATE INDEX task_instance_awaiting_input_idx ON task_instance USING btree (ready_at) WHERE (state = 'awaiting_input'::text)
  index CREATE INDEX task_instance_claimable_idx ON task_instance USING btree (queue, priority_weight DESC, id) WHERE (state = 'scheduled'::text)
  index CREATE INDEX task_instance_deferred_timeout_idx ON task_instance USING btree (trigger_timeout) WHERE ((state = 'deferred'::text) AND (trigger_timeout IS NOT NULL))
  index CREATE UNIQUE INDEX task_instance_key ON task_instance USING btree (dag_id, run_id, task_id, map_index)
  index CREATE UNIQUE INDEX task_instance_pkey ON task_instance USING btree (id)
  index CREATE INDEX task_instance_trigger_id_idx ON task_instance USING btree (trigger_id, state) WHERE (trigger_id IS NOT NULL)
  index CREATE INDEX task_instance_waiting_idx ON task_instance USING btree (ready_at) WHERE (state = ANY (ARRAY['up_for_retry'::text, 'up_for_reschedule'::text]))
  index CREATE INDEX task_instance_worker_idx ON task_instance USING btree (worker_job_id) WHERE (state = ANY (ARRAY['queued'::text, 'running'::text]))
  trigger CREATE TRIGGER task_instance_history_insert AFTER INSERT ON task_instance REFERENCING NEW TABLE AS made FOR EACH STATEMENT EXECUTE FUNCTION task_instance_history_made()
  trigger CREATE TRIGGER task_instance_history_update AFTER UPDATE ON task_instance REFERENCING OLD TABLE AS changed_from NEW TABLE AS changed_to FOR EACH STATEMENT EXECUTE FUNCTION task_instance_history_changed()
table task_instance_history
  column id bigint not null identity
  column task_instance_id bigint not null
  column try_number integer not null
  column state text
  column at timestamp with time zone not null
  column trigger_id bigint
  column worker_job_id bigint
  constraint task_instance_history_pkey PRIMARY KEY (id)
  index CREATE UNIQUE INDEX task_instance_history_pkey ON task_instance_history USING btree (id)
  index CREATE INDEX task_instance_history_ti_idx ON task_instance_history USING btree (task_instance_id, id)
table task_instance_signal
  column task_instance_id bigint not null
  column signal_key text not null
  column version bigint not null
  column acted_version bigint
  constraint task_instance_signal_pkey PRIMARY KEY (task_instance_id, signal_key)
  constraint task_instance_signal_task_instance_id_fkey FOREIGN KEY (task_instance_id) REFERENCES task_instance(id) ON DELETE CASCADE
  constraint task_instance_signal_version_check CHECK ((version >= 0))
  index CREATE INDEX task_instance_signal_key_idx ON task_instance_signal USING btree (signal_key, version)
  index CREATE UNIQUE INDEX task_instance_signal_pkey ON task_instance_signal USING btree (task_instance_id, signal_key)
table task_log
  column id bigint not null identity
  column task_instance_id bigint not null
  column try_number integer not null
  column logged_at timestamp with time zone not null
  column level text not null
  column message text not null
  column fields jsonb
  constraint task_log_pkey PRIMARY KEY (id)
  constraint task_log_task_instance_id_fkey FOREIGN KEY (task_instance_id) REFERENCES task_instance(id) ON DELETE CASCADE
  index CREATE UNIQUE INDEX task_log_pkey ON task_log USING btree (id)
  index CREATE INDEX task_log_try_idx ON task_log USING btree (task_instance_id, try_number, id)
table task_reschedule
  column id bigint not null identity
  column task_instance_id bigint not null
  column try_number integer not null
  column start_date timestamp with time zone not null
  column end_date timestamp with time zone not null
  column reschedule_date timestamp with time zone not null
  constraint task_reschedule_pkey PRIMARY KEY (id)
  constraint task_reschedule_task_instance_id_fkey FOREIGN KEY (task_instance_id) REFERENCES task_instance(id) ON DELETE CASCADE
  index CREATE UNIQUE INDEX task_reschedule_pkey ON task_reschedule USING btree (id)
  index CREATE INDEX task_reschedule_try_idx ON task_reschedule USING btree (task_instance_id, try_number, id)
table task_state
  column id bigint not null identity
  column task_instance_id bigint not null
  column key text not null
  column value jsonb not null
  column try_number integer not null
  column updated_at timestamp with time zone not null
  constraint task_state_pkey PRIMARY KEY (id)
  constraint task_state_task_instance_id_fkey FOREIGN KEY (task_instance_id) REFERENCES task_instance(id) ON DELETE CASCADE
  index CREATE UNIQUE INDEX task_state_key_idx ON task_state USING btree (task_instance_id, key)
  index CREATE UNIQUE INDEX task_state_pkey ON task_state USING btree (id)
table trigger
  column id bigint not null identity
  column classpath text not null
  column kwargs jsonb not null
  column created_at timestamp with time zone not null
  column triggerer_id bigint
  column hash text
  column priority_weight integer not null default 1
  column culprit_count integer not null default 0
  column quarantined_at timestamp with time zone
  column queue text not null default 'default'::text
  column watcher integer not null default 0
  column cursor jsonb
  column last_event_at timestamp with time zone
  constraint trigger_pkey PRIMARY KEY (id)
  index CREATE UNIQUE INDEX trigger_hash_idx ON trigger USING btree (hash)
  index CREATE UNIQUE INDEX trigger_pkey ON trigger USING btree (id)
  index CREATE INDEX trigger_quarantined_idx ON trigger USING btree (id) WHERE (quarantined_at IS NOT NULL)
  index CREATE INDEX trigger_signal_idx ON trigger USING btree (id) WHERE (classpath = 'deferflow.triggers.SignalTrigger'::text)
  index CREATE INDEX trigger_triggerer_id_idx ON trigger USING btree (triggerer_id) WHERE (triggerer_id IS NOT NULL)
  index CREATE INDEX trigger_unowned_idx ON trigger USING btree (queue, priority_weight DESC, created_at, id) WHERE ((triggerer_id IS NULL) AND (quarantined_at IS NULL))
table trigger_log
  column id bigint not null identity
  column trigger_id bigint not null
  column logged_at timestamp with time zone not null
  column level text not null
  column message text not null
  column fields jsonb
  constraint trigger_log_pkey PRIMARY KEY (id)
  index CREATE INDEX trigger_log_logged_at_idx ON trigger_log USING btree (logged_at)
  index CREATE UNIQUE INDEX trigger_log_pkey ON trigger_log USING btree (id)
  index CREATE INDEX trigger_log_trigger_idx ON trigger_log USING btree (trigger_id, id)
table trigger_member
  column id bigint not null identity
  column composite_id bigint not null
  column member_index integer not null
  column member_id bigint not null
  column outcome jsonb
  column fired_at timestamp with time zone
  constraint trigger_member_pkey PRIMARY KEY (id)
  index CREATE UNIQUE INDEX trigger_member_composite_idx ON trigger_member USING btree (composite_id, member_index)
  index CREATE INDEX trigger_member_member_idx ON trigger_member USING btree (member_id)
  index CREATE UNIQUE INDEX trigger_member_pkey ON trigger_member USING btree (id)
table trigger_wait
  column task_instance_id bigint not null
  column try_number integer not null
  column trigger_id bigint not null
  column waited_from timestamp with time zone not null
  constraint trigger_wait_pkey PRIMARY KEY (task_instance_id, try_number, trigger_id)
  constraint trigger_wait_task_instance_id_fkey FOREIGN KEY (task_instance_id) REFERENCES task_instance(id) ON DELETE CASCADE
  index CREATE UNIQUE INDEX trigger_wait_pkey ON trigger_wait USING btree (task_instance_id, try_number, trigger_id)
function task_instance_history_changed CREATE OR REPLACE FUNCTION task_instance_history_changed() RETURNS trigger LANGUAGE plpgsql SET search_path TO '<schema>' AS $function$ begin insert into task_instance_history (task_instance_id, try_number, state, at, trigger_id, worker_job_id) select n.id, n.try_number, n.state, coalesce(n.updated_at, statement_timestamp()), n.trigger_id, n.worker_job_id from changed_to n join changed_from o on o.id = n.id where n.state is distinct from o.state; return null; end $function$
function task_instance_history_made CREATE OR REPLACE FUNCTION task_instance_history_made() RETURNS trigger LANGUAGE plpgsql SET search_path TO '<schema>' AS $function$ begin insert into task_instance_history (task_instance_id, try_number, state, at, trigger_id, worker_job_id) select n.id, n.try_number, n.state, coalesce(n.updated_at, statement_timestamp()), n.trigger_id, n.worker_job_id from made n; return null; end $function$
