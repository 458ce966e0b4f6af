DROP FUNCTION signoff_delivery_state(text[]);
DROP INDEX webhook_deliveries_failed_idx;
DROP INDEX tool_calls_unknown_idx;
