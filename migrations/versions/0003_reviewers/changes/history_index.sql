-- Reviewers' history, newest decision first: read in index order, never sorted whole.
CREATE INDEX approvals_decided_idx ON approvals
    ((COALESCE(decided_at, requested_at)) DESC, approval_id DESC)
    WHERE ((status)::text <> 'pending'::text);
