CREATE TABLE tool_calls (
    run_id text NOT NULL,
    call_id text NOT NULL,
    tool text NOT NULL,
    effect signoff_call_effect NOT NULL,
    once_per_run boolean NOT NULL,
    request_digest text NOT NULL,
    args_digest text NOT NULL,
    args_sealed bytea NOT NULL,
    idempotency_key text NOT NULL,
    approval_id text,
    status signoff_call_status NOT NULL,
    attempts integer NOT NULL,
    worker_id text NOT NULL,
    lease_until timestamp with time zone,
    result_digest text,
    result_sealed bytea,
    resolved_by text,
    started_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone,
    waiters integer DEFAULT 0 NOT NULL,
    version integer NOT NULL,
    approved_by text[] DEFAULT '{}'::text[] NOT NULL,
    approval_stream text,
    stream_id text NOT NULL,
    CONSTRAINT tool_calls_pkey PRIMARY KEY (run_id, call_id)
);
CREATE UNIQUE INDEX tool_calls_once_per_run_idx ON tool_calls (run_id, tool) WHERE once_per_run;
CREATE INDEX tool_calls_running_idx ON tool_calls (lease_until) WHERE ((status)::text = 'running'::text);
CREATE INDEX tool_calls_started_idx ON tool_calls (started_at);
