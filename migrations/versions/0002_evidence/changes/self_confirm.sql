-- The self-confirm tier: a worker may append a self-confirmation (`self_confirmed`), which
-- signoff_commit_approval takes only as the session's own login on a self-confirm approval.
INSERT INTO event_rights (type_pattern, role, when_field, stream_prefix)
    VALUES ('approval.decided', 'signoff_app', 'self_confirmed', 'approval:');
