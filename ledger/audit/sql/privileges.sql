-- Integrating is for the roles that take digests: the owner (the CLI) and signoff_reviewer
-- (`signoff serve`, which signs digests for auditors). No role but the owner writes the tables,
-- so no worker can edit a stored hash; every role reads the tree (`ledger verify`, run on a
-- worker's login, compares it with the events).
REVOKE EXECUTE ON FUNCTION signoff_tree_integrate(bigint, bigint, text, bigint, bytea, integer[],
    bigint[], bytea[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_tree_integrate(bigint, bigint, text, bigint, bytea, integer[],
    bigint[], bytea[]) TO signoff_reviewer;
GRANT SELECT ON tree_state TO signoff_app, signoff_reviewer, signoff_auditor, signoff_key_admin;
GRANT SELECT ON tree_tiles TO signoff_app, signoff_reviewer, signoff_auditor, signoff_key_admin;
