-- Which event types each role may append, and into which streams: every write function checks
-- each event against this table for the login (`session_user`, who connected, whatever role it
-- set). The owner may append anything; event types no row names (the reviewer directory's,
-- tokens', an application's own) are the owner's alone. Types and stream prefixes are compared
-- as they are written, byte for byte: case counts, and `_` is a character like any other.
CREATE TABLE event_rights (
    -- An event type, exactly; or, ending in `%`, every type that starts with the text before
    -- it (the `%` is the only wildcard, and only there).
    type_pattern text NOT NULL,
    role name NOT NULL,
    -- '': always; else only events whose data holds this field as a JSON object.
    when_field text DEFAULT ''::text NOT NULL,
    -- The streams the right applies to: those whose id starts with this text.
    stream_prefix text NOT NULL,
    CONSTRAINT event_rights_pkey PRIMARY KEY (type_pattern, role, when_field, stream_prefix),
    CONSTRAINT event_rights_type_pattern_check
        CHECK (type_pattern <> '' AND strpos(left(type_pattern, -1), '%') = 0),
    CONSTRAINT event_rights_stream_prefix_check CHECK (stream_prefix <> '')
);
INSERT INTO event_rights (type_pattern, role, when_field, stream_prefix) VALUES
    -- A worker may record the approval a sticky grant gives (`grant`: the reviewer's signed
    -- grant; signoff_commit_approval checks it is that grant's, in force, for this run and
    -- tool), never a reviewer's decision. It may expire a request only once it is due and
    -- withdraw one only in its requester's name (signoff_commit_approval checks both).
    ('approval.decided', 'signoff_app', 'grant', 'approval:'),
    -- ... and a self-confirmation (`self_confirmed`: the session's own login, on a self-confirm
    -- approval only; signoff_commit_approval checks both), never under a reviewer's name.
    ('approval.decided', 'signoff_app', 'self_confirmed', 'approval:'),
    ('approval.requested', 'signoff_app', '', 'approval:'),
    ('approval.consumed', 'signoff_app', '', 'approval:'),
    ('approval.expired', 'signoff_app', '', 'approval:'),
    ('approval.cancelled', 'signoff_app', '', 'approval:'),
    -- A reviewer's decision, cancellation and grant are signed (`signature`), as below.
    ('approval.decided', 'signoff_reviewer', 'signature', 'approval:'),
    ('approval.expired', 'signoff_reviewer', '', 'approval:'),
    ('approval.cancelled', 'signoff_reviewer', 'signature', 'approval:'),
    ('approval.granted', 'signoff_reviewer', 'signature', 'grant:'),
    ('call.started', 'signoff_app', '', 'call:'),
    ('call.retried', 'signoff_app', '', 'call:'),
    ('call.succeeded', 'signoff_app', '', 'call:'),
    ('call.failed', 'signoff_app', '', 'call:'),
    ('call.outcome_unknown', 'signoff_app', '', 'call:'),
    ('call.denied', 'signoff_app', '', 'call:'),
    ('call.responded', 'signoff_app', '', 'call:'),
    ('call.outcome_unknown', 'signoff_reviewer', '', 'call:'),
    -- Whatever names a person carries the reviewer side's signature (`signature`): the
    -- database checks it is there, `ledger verify` that it is valid.
    ('call.resolved', 'signoff_reviewer', 'signature', 'call:'),
    ('ledger.revealed', 'signoff_reviewer', 'signature', 'reveal:'),
    -- A policy set names its publisher: signed like a decision (signoff_commit_policy).
    ('policy.published', 'signoff_reviewer', 'signature', 'policy:'),
    ('key.%', 'signoff_key_admin', '', 'keys:');
