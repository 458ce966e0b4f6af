REVOKE EXECUTE ON FUNCTION signoff_append(text, integer, text[], json[], text[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_append(text, integer, text[], json[], text[], text) TO signoff_app, signoff_reviewer, signoff_key_admin;
REVOKE EXECUTE ON FUNCTION signoff_write_events(text, integer, text[], json[], text[], text) FROM PUBLIC;
GRANT SELECT ON events TO signoff_app, signoff_key_admin, signoff_reviewer;
GRANT SELECT ON audit_events TO signoff_auditor;
GRANT SELECT ON event_rights TO signoff_app, signoff_reviewer, signoff_key_admin;
