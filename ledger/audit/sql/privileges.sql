REVOKE EXECUTE ON FUNCTION signoff_tree_integrate(bigint, bigint, text, bigint, bytea, integer[], bigint[], bytea[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_tree_integrate(bigint, bigint, text, bigint, bytea, integer[], bigint[], bytea[]) TO signoff_reviewer;
GRANT SELECT ON tree_state TO signoff_app, signoff_reviewer, signoff_auditor, signoff_key_admin;
GRANT SELECT ON tree_tiles TO signoff_app, signoff_reviewer, signoff_auditor, signoff_key_admin;
