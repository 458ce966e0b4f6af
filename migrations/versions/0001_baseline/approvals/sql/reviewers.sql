-- The reviewer directory: the projection of the `reviewer:<id>` streams. A reviewer's groups
-- come from here, never from whoever asks to decide. Directory changes are an administrator's:
-- only the owner writes the table (signoff_commit_reviewer, the row with its `reviewer.*`
-- events), so it can be rebuilt from the journal. A removed reviewer keeps its row (`active`
-- false), so its stream and row stay one history.
CREATE TABLE reviewers (
    reviewer_id text NOT NULL,
    groups text[] DEFAULT '{}'::text[] NOT NULL,
    active boolean NOT NULL,
    changed_by text NOT NULL,
    changed_at timestamp with time zone NOT NULL,
    version integer NOT NULL,
    -- Ids are normalised by `approvals.identity.reviewer_id` (NFKC, trimmed, no whitespace,
    -- controls or separators, at most 128 characters); this check is a backstop.
    CONSTRAINT reviewers_reviewer_id_check CHECK (((reviewer_id <> ''::text)
        AND (length(reviewer_id) <= 128) AND (reviewer_id !~ '[[:space:][:cntrl:]]'::text))),
    CONSTRAINT reviewers_pkey PRIMARY KEY (reviewer_id)
);
