-- LangGraph's channel values, in the table langgraph-checkpoint-postgres 3.x makes: the
-- workers' own state, like `checkpoints` (checkpoints.sql says who may do what with it).
CREATE TABLE checkpoint_blobs (
    thread_id text NOT NULL,
    checkpoint_ns text DEFAULT ''::text NOT NULL,
    channel text NOT NULL,
    version text NOT NULL,
    type text NOT NULL,
    blob bytea,
    CONSTRAINT checkpoint_blobs_pkey PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
);
CREATE INDEX checkpoint_blobs_thread_id_idx ON checkpoint_blobs (thread_id);
