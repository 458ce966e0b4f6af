-- The roles whose processes commit calls report a loss they find; auditors read the losses;
-- only the owner records or settles one.
REVOKE EXECUTE ON FUNCTION signoff_report_history_lost(bigint[], text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_report_history_lost(bigint[], text[])
    TO signoff_app, signoff_reviewer;
GRANT SELECT ON history_losses TO signoff_auditor;
