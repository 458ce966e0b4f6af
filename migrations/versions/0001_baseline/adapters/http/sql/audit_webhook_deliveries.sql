-- What auditors read of webhook deliveries: the target as the URL's host and port only, as a
-- URL's path is often its secret.
CREATE OR REPLACE VIEW audit_webhook_deliveries AS
 SELECT webhook_deliveries.delivery_id,
    webhook_deliveries."position",
    webhook_deliveries.kind,
    "substring"(webhook_deliveries.target, '^https?://(?:[^/?#@]*@)?([^/?#]*)'::text) AS target_host,
    webhook_deliveries.attempts,
    webhook_deliveries.next_attempt_at,
    webhook_deliveries.last_status,
    webhook_deliveries.last_error,
    webhook_deliveries.delivered_at,
    webhook_deliveries.created_at
   FROM webhook_deliveries;
