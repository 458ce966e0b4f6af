-- Every role may read alembic_version, so the service's schema probe works on any of their
-- logins. Auditors hold USAGE on the schema to reach what they are granted in it (the audit_*
-- views above all).
GRANT USAGE ON SCHEMA public TO signoff_auditor;
GRANT SELECT ON alembic_version
    TO signoff_app, signoff_reviewer, signoff_key_admin, signoff_auditor;
