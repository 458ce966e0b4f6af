-- LangGraph's pending writes, in the table langgraph-checkpoint-postgres 3.x makes: the
-- workers' own state, like `checkpoints` (checkpoints.sql says who may do what with it).
CREATE TABLE checkpoint_writes (
    thread_id text NOT NULL,
    checkpoint_ns text DEFAULT ''::text NOT NULL,
    checkpoint_id text NOT NULL,
    task_id text NOT NULL,
    idx integer NOT NULL,
    channel text NOT NULL,
    type text,
    blob bytea NOT NULL,
    task_path text DEFAULT ''::text NOT NULL,
    CONSTRAINT checkpoint_writes_pkey
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
);
CREATE INDEX checkpoint_writes_thread_id_idx ON checkpoint_writes (thread_id);
