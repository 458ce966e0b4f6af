-- The service's login (signoff_reviewer) records, claims and settles deliveries through these
-- functions alone; auditors read the deliveries through the view, without the URLs' paths.
REVOKE EXECUTE ON FUNCTION signoff_webhook_attempted(bigint, timestamp with time zone, integer,
    text, boolean, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_webhook_attempted(bigint, timestamp with time zone, integer,
    text, boolean, double precision) TO signoff_reviewer;
REVOKE EXECUTE ON FUNCTION signoff_webhook_claim(text, integer, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_webhook_claim(text, integer, double precision)
    TO signoff_reviewer;
REVOKE EXECUTE ON FUNCTION signoff_webhook_latest(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_webhook_latest(text) TO signoff_reviewer;
REVOKE EXECUTE ON FUNCTION signoff_webhook_record(bigint[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_webhook_record(bigint[], text) TO signoff_reviewer;
GRANT SELECT ON audit_webhook_deliveries TO signoff_auditor;
