-- Webhook and notifier deliveries: what `signoff serve` sends, to where, and how each attempt
-- went. One row per journal event and target (a URL; for e-mail smtp://host:port/#digest), unique
-- on the two, so however many replicas of the service see an event, it is delivered once. The
-- service's login (signoff_reviewer) neither reads nor writes the table, as people hold
-- reviewers' logins too and a URL's path is often its secret (Slack's incoming webhooks): it
-- goes through the signoff_webhook_* functions, which take their times from the database.
CREATE TABLE webhook_deliveries (
    delivery_id bigint GENERATED ALWAYS AS IDENTITY,
    "position" bigint NOT NULL,
    kind text NOT NULL,
    target text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    -- NULL: no attempt is due (delivered, or given up).
    next_attempt_at timestamp with time zone,
    -- A claim's lease: while it runs, no other replica claims the row.
    leased_until timestamp with time zone,
    -- The HTTP status of the last attempt (NULL: no answer).
    last_status integer,
    last_error text,
    delivered_at timestamp with time zone,
    created_at timestamp with time zone NOT NULL,
    CONSTRAINT webhook_deliveries_attempts_check CHECK ((attempts >= 0)),
    CONSTRAINT webhook_deliveries_kind_check
        CHECK ((kind = ANY (ARRAY['approval.requested'::text, 'call.outcome_unknown'::text]))),
    CONSTRAINT webhook_deliveries_last_error_check CHECK ((length(last_error) <= 500)),
    CONSTRAINT webhook_deliveries_target_check
        CHECK (((target ~ '^(https?|smtp)://'::text) AND (length(target) <= 2048))),
    CONSTRAINT webhook_deliveries_pkey PRIMARY KEY (delivery_id),
    CONSTRAINT webhook_deliveries_position_target_key UNIQUE ("position", target)
);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (target, next_attempt_at)
    WHERE (next_attempt_at IS NOT NULL);
