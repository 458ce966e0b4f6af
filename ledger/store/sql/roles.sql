-- The roles, each with one job (docs/pages/operations/roles.md); deployments grant
-- them to logins.
--   signoff_app        agent workers: request approvals, record calls, read and write checkpoints
--   signoff_reviewer   the reviewer side: decide, resolve, reveal with a record, run webhooks
--   signoff_key_admin  data keys: create, rotate, retire, rewrap
--   signoff_auditor    read the audit views
-- Roles belong to the cluster, not to one database: created once, kept when a database is
-- migrated down (its grants go with the objects dropped).
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['signoff_app', 'signoff_reviewer', 'signoff_key_admin',
                             'signoff_auditor'] LOOP
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
    END LOOP;
END
$$;
