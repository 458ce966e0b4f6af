-- Each run's history as policies read it: per tool, the calls that started running (not those
-- denied or answered instead) and the sums of their numeric top-level arguments, over the
-- whole run (bucket '-infinity') and per UTC hour. signoff_commit_call writes it with each
-- call's intent; a worker judging a call reads at most (tools x 25) rows of it, whatever the
-- run's length. The sums stay in the database: workers alone read this table.
CREATE TABLE call_tallies (
    run_id text NOT NULL,
    bucket timestamp with time zone NOT NULL,
    tool text NOT NULL,
    calls bigint NOT NULL,
    sums jsonb NOT NULL,
    CONSTRAINT call_tallies_pkey PRIMARY KEY (run_id, bucket, tool)
);
GRANT SELECT ON call_tallies TO signoff_app;
