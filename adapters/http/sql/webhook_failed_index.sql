-- The deliveries that failed at least once: the only ones with a failed attempt, so
-- signoff_delivery_state counts failures without reading the rest (nearly all deliveries).
CREATE INDEX webhook_deliveries_failed_idx ON webhook_deliveries (target)
    WHERE ((attempts > 1) OR ((attempts > 0) AND (delivered_at IS NULL)));
