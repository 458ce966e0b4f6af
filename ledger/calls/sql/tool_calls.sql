-- One row per (run, call id): the projection of the call's stream, written with its events by
-- signoff_commit_call, plus what is kept here rather than in the journal because it can be
-- large: the sealed arguments that ran (after an edit, the reviewer's) and the sealed result.
-- The journal holds their digests, so a replaced value is detected. `request_digest` is the
-- digest of the arguments the model asked with; `version` is the stream version the row
-- reflects, which the next step expects.
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
    -- Renewed by the worker holding the call's lease (see lease_token_hash), on the server's
    -- clock; a lapsed lease means the worker died.
    lease_until timestamp with time zone,
    result_digest text,
    result_sealed bytea,
    resolved_by text,
    started_at timestamp with time zone NOT NULL,
    finished_at timestamp with time zone,
    -- Processes waiting for the outcome: a step NOTIFYs only when somebody waits.
    waiters integer DEFAULT 0 NOT NULL,
    version integer NOT NULL,
    -- The reviewers whose decision allowed the call, and where that approval's events are,
    -- which `call.started` records too, so audit reads them from the call.
    approved_by text[] DEFAULT '{}'::text[] NOT NULL,
    approval_stream text,
    -- `call:<run>/<call id>`, `%` and `/` in either part percent-encoded, so two calls never
    -- share a stream.
    stream_id text NOT NULL,
    -- SHA-256 of the lease token only the worker holding a running call's lease knows: it
    -- alone renews the lease or moves the call until the lease lapses (signoff_commit_call).
    lease_token_hash bytea,
    CONSTRAINT tool_calls_pkey PRIMARY KEY (run_id, call_id)
);
-- A once-per-run tool has at most one call in a run.
CREATE UNIQUE INDEX tool_calls_once_per_run_idx ON tool_calls (run_id, tool) WHERE once_per_run;
CREATE INDEX tool_calls_running_idx ON tool_calls (lease_until)
    WHERE ((status)::text = 'running'::text);
CREATE INDEX tool_calls_started_idx ON tool_calls (started_at);
