-- The losses go with the function that reports them; signoff_commit_call comes back from its
-- frozen copy (0007_telemetry), which does not read them.
DROP FUNCTION signoff_report_history_lost(bigint[], text[]);
DROP TABLE history_losses;
