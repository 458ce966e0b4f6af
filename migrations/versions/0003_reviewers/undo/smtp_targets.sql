-- Before revision 0003 nothing sent e-mail: its deliveries go with the target it allowed.
DELETE FROM webhook_deliveries WHERE target ~ '^smtp://';
ALTER TABLE webhook_deliveries
    DROP CONSTRAINT webhook_deliveries_target_check,
    ADD CONSTRAINT webhook_deliveries_target_check
        CHECK (((target ~ '^https?://'::text) AND (length(target) <= 2048)));
