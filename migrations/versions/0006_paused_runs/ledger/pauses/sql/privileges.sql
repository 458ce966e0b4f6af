-- Workers keep and resume paused runs through the functions alone; they read the rows (which
-- hold only sealed state) to find a run's open pause.
GRANT SELECT ON paused_runs TO signoff_app;
REVOKE EXECUTE ON FUNCTION signoff_pause_run(text, text, text, text[], bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_pause_run(text, text, text, text[], bytea) TO signoff_app;
REVOKE EXECUTE ON FUNCTION signoff_claim_pause(text, text, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_claim_pause(text, text, double precision) TO signoff_app;
REVOKE EXECUTE ON FUNCTION signoff_finish_pause(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_finish_pause(text, text) TO signoff_app;
REVOKE EXECUTE ON FUNCTION signoff_renew_pause(text, text, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_renew_pause(text, text, double precision) TO signoff_app;
REVOKE EXECUTE ON FUNCTION signoff_release_pause(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_release_pause(text, text) TO signoff_app;
REVOKE EXECUTE ON FUNCTION signoff_pause_again(text, text, text, text[], bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_pause_again(text, text, text, text[], bytea) TO signoff_app;
