-- Which event types each role may append: every write function checks each event against this
-- table for the login (`session_user`, who connected, whatever role it set). The owner may
-- append anything; event types no row names (the reviewer directory's, tokens', an
-- application's own) are the owner's alone.
CREATE TABLE event_rights (
    -- A LIKE pattern over event types.
    type_pattern text NOT NULL,
    role name NOT NULL,
    -- '': always; else only events whose data holds this field as a JSON object.
    when_field text DEFAULT ''::text NOT NULL,
    CONSTRAINT event_rights_pkey PRIMARY KEY (type_pattern, role, when_field)
);
INSERT INTO event_rights VALUES
    -- A worker may record the approval a sticky grant gives (`grant`: the reviewer's signed
    -- grant, which every consumer checks), never a reviewer's decision.
    ('approval.decided', 'signoff_app', 'grant'),
    -- ... and a self-confirmation (`self_confirmed`: the session's own login, on a self-confirm
    -- approval only; signoff_commit_approval checks both), never under a reviewer's name.
    ('approval.decided', 'signoff_app', 'self_confirmed'),
    ('approval.requested', 'signoff_app', ''),
    ('approval.consumed', 'signoff_app', ''),
    ('approval.expired', 'signoff_app', ''),
    ('approval.cancelled', 'signoff_app', ''),
    ('approval.decided', 'signoff_reviewer', ''),
    ('approval.expired', 'signoff_reviewer', ''),
    ('approval.cancelled', 'signoff_reviewer', ''),
    ('approval.granted', 'signoff_reviewer', ''),
    ('call.started', 'signoff_app', ''),
    ('call.retried', 'signoff_app', ''),
    ('call.succeeded', 'signoff_app', ''),
    ('call.failed', 'signoff_app', ''),
    ('call.outcome_unknown', 'signoff_app', ''),
    ('call.denied', 'signoff_app', ''),
    ('call.responded', 'signoff_app', ''),
    ('call.outcome_unknown', 'signoff_reviewer', ''),
    ('call.resolved', 'signoff_reviewer', ''),
    ('ledger.revealed', 'signoff_reviewer', ''),
    ('key.%', 'signoff_key_admin', '');
