-- Workers, whose processes run calls and keep a history fence, report a loss they find;
-- auditors read the losses; only the owner records or settles one.
REVOKE EXECUTE ON FUNCTION signoff_report_history_lost(bigint[], text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_report_history_lost(bigint[], text[]) TO signoff_app;
GRANT SELECT ON history_losses TO signoff_auditor;
