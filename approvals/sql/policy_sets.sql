-- Published Cedar policy sets: the projection of the `policy:<version>` streams, one
-- `policy.published` event each, signed by the reviewer side and naming the administrator who
-- published it. Versions run 1, 2, 3... without gaps; the highest is the active set. `mode`:
-- enforce (the set decides), log_only (recorded beside the calls; the tools' own rules decide)
-- or off (the tools' own rules decide, nothing recorded). Workers read it; only
-- signoff_commit_policy writes it, so it can be rebuilt from the journal.
CREATE TABLE policy_sets (
    version integer NOT NULL,
    set_hash text NOT NULL,
    mode text NOT NULL,
    policies text NOT NULL,
    policy_ids text[] NOT NULL,
    tools jsonb NOT NULL,
    timezone text NOT NULL,
    published_by text NOT NULL,
    published_at timestamp with time zone NOT NULL,
    signature jsonb NOT NULL,
    CONSTRAINT policy_sets_pkey PRIMARY KEY (version),
    CONSTRAINT policy_sets_version_check CHECK ((version > 0)),
    CONSTRAINT policy_sets_mode_check
        CHECK ((mode = ANY (ARRAY['enforce'::text, 'log_only'::text, 'off'::text])))
);
