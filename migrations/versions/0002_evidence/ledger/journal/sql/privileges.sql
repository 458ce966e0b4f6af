-- Logins append only through signoff_append, which checks their event rights and refuses the
-- streams that are written with their rows; signoff_write_events is for the owner's functions,
-- no login's. Every role that appends reads the journal and the rights; auditors read the
-- journal through audit_events only.
REVOKE EXECUTE ON FUNCTION signoff_append(text, integer, text[], json[], text[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_append(text, integer, text[], json[], text[], text)
    TO signoff_app, signoff_reviewer, signoff_key_admin;
REVOKE EXECUTE ON FUNCTION signoff_write_events(text, integer, text[], json[], text[], text)
    FROM PUBLIC;
GRANT SELECT ON events TO signoff_app, signoff_key_admin, signoff_reviewer;
GRANT SELECT ON audit_events TO signoff_auditor;
GRANT SELECT ON event_rights TO signoff_app, signoff_reviewer, signoff_key_admin;
