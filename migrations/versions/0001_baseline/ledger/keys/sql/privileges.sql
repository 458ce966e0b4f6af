-- No role writes data_keys directly: the key administrator makes, rotates, retires and rewraps
-- keys through the functions, and every role that seals (workers, reviewers, key
-- administrators) may only reserve nonces. All of them read the table: each unwraps with its
-- own KEK.
REVOKE EXECUTE ON FUNCTION signoff_key_create(text, text, text, bytea, bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_key_create(text, text, text, bytea, bytea) TO signoff_key_admin;
REVOKE EXECUTE ON FUNCTION signoff_key_retire(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_key_retire(text) TO signoff_key_admin;
REVOKE EXECUTE ON FUNCTION signoff_key_rewrap(text, text, bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_key_rewrap(text, text, bytea) TO signoff_key_admin;
REVOKE EXECUTE ON FUNCTION signoff_key_rotate(text, text, text, bytea, bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_key_rotate(text, text, text, bytea, bytea) TO signoff_key_admin;
REVOKE EXECUTE ON FUNCTION signoff_reserve_nonces(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_reserve_nonces(text, integer)
    TO signoff_app, signoff_reviewer, signoff_key_admin;
GRANT SELECT ON data_keys TO signoff_app, signoff_reviewer, signoff_key_admin;
