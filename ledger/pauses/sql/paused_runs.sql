-- The paused state of agent runs whose framework keeps it in the application (the OpenAI Agents
-- SDK's RunState, Pydantic AI's message history and deferred tool requests): kept here, sealed
-- with the key ring (bound to `pause:<pause id>`), so any worker resumes the run and the client
-- never supplies it. One pause is resumed once: `signoff_claim_pause` hands it to one worker at
-- a time (a lease, taken over once it lapses: the worker died) and `signoff_finish_pause` ends
-- it. Workers write it only through these functions.
CREATE TABLE paused_runs (
    pause_id text NOT NULL,
    run_id text NOT NULL,
    framework text NOT NULL,
    approval_ids text[] NOT NULL,
    state_sealed bytea NOT NULL,
    status text NOT NULL,
    paused_by text NOT NULL,
    paused_at timestamp with time zone NOT NULL,
    worker_id text,
    lease_until timestamp with time zone,
    resumed_at timestamp with time zone,
    CONSTRAINT paused_runs_pkey PRIMARY KEY (pause_id),
    CONSTRAINT paused_runs_status_check
        CHECK ((status = ANY (ARRAY['paused'::text, 'resuming'::text, 'resumed'::text]))),
    CONSTRAINT paused_runs_ids_check CHECK (((pause_id <> ''::text) AND (run_id <> ''::text)
        AND (length(pause_id) <= 200) AND (length(run_id) <= 512)))
);
CREATE INDEX paused_runs_run_idx ON paused_runs (run_id, paused_at);
