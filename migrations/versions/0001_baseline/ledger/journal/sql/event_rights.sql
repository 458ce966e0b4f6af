CREATE TABLE event_rights (
    type_pattern text NOT NULL,
    role name NOT NULL,
    when_field text DEFAULT ''::text NOT NULL,
    CONSTRAINT event_rights_pkey PRIMARY KEY (type_pattern, role, when_field)
);
INSERT INTO event_rights VALUES
    ('approval.decided', 'signoff_app', 'grant'),
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
