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
    -- grant, which every consumer checks), never a reviewer's decision.
    ('approval.decided', 'signoff_app', 'grant', 'approval:'),
    ('approval.requested', 'signoff_app', '', 'approval:'),
    ('approval.consumed', 'signoff_app', '', 'approval:'),
    ('approval.expired', 'signoff_app', '', 'approval:'),
    ('approval.cancelled', 'signoff_app', '', 'approval:'),
    ('approval.decided', 'signoff_reviewer', '', 'approval:'),
    ('approval.expired', 'signoff_reviewer', '', 'approval:'),
    ('approval.cancelled', 'signoff_reviewer', '', 'approval:'),
    ('approval.granted', 'signoff_reviewer', '', 'grant:'),
    ('call.started', 'signoff_app', '', 'call:'),
    ('call.retried', 'signoff_app', '', 'call:'),
    ('call.succeeded', 'signoff_app', '', 'call:'),
    ('call.failed', 'signoff_app', '', 'call:'),
    ('call.outcome_unknown', 'signoff_app', '', 'call:'),
    ('call.denied', 'signoff_app', '', 'call:'),
    ('call.responded', 'signoff_app', '', 'call:'),
    ('call.outcome_unknown', 'signoff_reviewer', '', 'call:'),
    ('call.resolved', 'signoff_reviewer', '', 'call:'),
    ('ledger.revealed', 'signoff_reviewer', '', 'reveal:'),
    ('key.%', 'signoff_key_admin', '', 'keys:');
