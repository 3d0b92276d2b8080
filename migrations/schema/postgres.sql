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
  constraint job_pkey PRIMARY KEY (id)
  constraint job_state_check CHECK ((state = ANY (ARRAY['running'::text, 'success'::text, 'failed'::text])))
  index CREATE UNIQUE INDEX job_pkey ON job USING btree (id)
  index CREATE INDEX job_type_heartbeat_idx ON job USING btree (job_type, latest_heartbeat)
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
  constraint task_instance_key UNIQUE (dag_id, task_id, run_id, map_index)
  constraint task_instance_pkey PRIMARY KEY (id)
  constraint task_instance_state_check CHECK ((state = ANY (ARRAY['scheduled'::text, 'queued'::text, 'running'::text, 'deferred'::text, 'success'::text, 'failed'::text, 'up_for_retry'::text, 'up_for_reschedule'::text, 'skipped'::text])))
  constraint task_instance_trigger_id_fkey FOREIGN KEY (trigger_id) REFERENCES trigger(id)
  constraint task_instance_trigger_only_when_deferred CHECK (((trigger_id IS NULL) OR COALESCE((state = 'deferred'::text), false)))
  index CREATE INDEX task_instance_deferred_timeout_idx ON task_instance USING btree (trigger_timeout) WHERE ((state = 'deferred'::text) AND (trigger_timeout IS NOT NULL))
  index CREATE UNIQUE INDEX task_instance_key ON task_instance USING btree (dag_id, task_id, run_id, map_index)
  index CREATE UNIQUE INDEX task_instance_pkey ON task_instance USING btree (id)
  index CREATE INDEX task_instance_state_idx ON task_instance USING btree (state)
  index CREATE INDEX task_instance_trigger_id_idx ON task_instance USING btree (trigger_id, state) WHERE (trigger_id IS NOT NULL)
table trigger
  column id bigint not null identity
  column classpath text not null
  column kwargs jsonb not null
  column created_at timestamp with time zone not null
  column triggerer_id bigint
  column hash text
  column priority_weight integer not null default 1
  constraint trigger_pkey PRIMARY KEY (id)
  index CREATE UNIQUE INDEX trigger_hash_idx ON trigger USING btree (hash)
  index CREATE UNIQUE INDEX trigger_pkey ON trigger USING btree (id)
  index CREATE INDEX trigger_triggerer_id_idx ON trigger USING btree (triggerer_id)
  index CREATE INDEX trigger_unowned_idx ON trigger USING btree (priority_weight DESC, created_at, id) WHERE (triggerer_id IS NULL)
