-- LangGraph's checkpoints, in the table langgraph-checkpoint-postgres 3.x makes, created by the
-- migrations so workers need no CREATE right. The workers' own state: they read and write it
-- directly, every row encrypted and authenticated by Signoff's checkpointer; the key
-- administrator re-encrypts it.
CREATE TABLE checkpoints (
    thread_id text NOT NULL,
    checkpoint_ns text DEFAULT ''::text NOT NULL,
    checkpoint_id text NOT NULL,
    parent_checkpoint_id text,
    type text,
    checkpoint jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    CONSTRAINT checkpoints_pkey PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
);
CREATE INDEX checkpoints_thread_id_idx ON checkpoints (thread_id);
