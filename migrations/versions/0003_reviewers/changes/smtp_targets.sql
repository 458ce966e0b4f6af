-- E-mail deliveries are recorded under an smtp:// target (the server, and a digest of the
-- sender and recipients), beside the http(s) targets of webhooks and Slack.
ALTER TABLE webhook_deliveries
    DROP CONSTRAINT webhook_deliveries_target_check,
    ADD CONSTRAINT webhook_deliveries_target_check
        CHECK (((target ~ '^(https?|smtp)://'::text) AND (length(target) <= 2048)));
