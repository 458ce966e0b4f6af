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
    -- grant; signoff_commit_approval checks it is that grant's, in force, for this run and
    -- tool), never a reviewer's decision. It may expire a request only once it is due and
    -- withdraw one only in its requester's name (signoff_commit_approval checks both).
    ('approval.decided', 'signoff_app', 'grant'),
    ('approval.requested', 'signoff_app', ''),
    ('approval.consumed', 'signoff_app', ''),
    ('approval.expired', 'signoff_app', ''),
    ('approval.cancelled', 'signoff_app', ''),
    -- A reviewer's decision, cancellation and grant are signed (`signature`), as below.
    ('approval.decided', 'signoff_reviewer', 'signature'),
    ('approval.expired', 'signoff_reviewer', ''),
    ('approval.cancelled', 'signoff_reviewer', 'signature'),
    ('approval.granted', 'signoff_reviewer', 'signature'),
    ('call.started', 'signoff_app', ''),
    ('call.retried', 'signoff_app', ''),
    ('call.succeeded', 'signoff_app', ''),
    ('call.failed', 'signoff_app', ''),
    ('call.outcome_unknown', 'signoff_app', ''),
    ('call.denied', 'signoff_app', ''),
    ('call.responded', 'signoff_app', ''),
    ('call.outcome_unknown', 'signoff_reviewer', ''),
    -- Whatever names a person carries the reviewer side's signature (`signature`): the
    -- database checks it is there, `ledger verify` that it is valid.
    ('call.resolved', 'signoff_reviewer', 'signature'),
    ('ledger.revealed', 'signoff_reviewer', 'signature'),
    ('key.%', 'signoff_key_admin', '');
