CREATE TABLE reviewers (
    reviewer_id text NOT NULL,
    groups text[] DEFAULT '{}'::text[] NOT NULL,
    active boolean NOT NULL,
    changed_by text NOT NULL,
    changed_at timestamp with time zone NOT NULL,
    version integer NOT NULL,
    CONSTRAINT reviewers_reviewer_id_check CHECK (((reviewer_id <> ''::text) AND (length(reviewer_id) <= 128) AND (reviewer_id !~ '[[:space:][:cntrl:]]'::text))),
    CONSTRAINT reviewers_pkey PRIMARY KEY (reviewer_id)
);
