-- What auditors read of tool calls: no sealed arguments or results, leases or waiters; who
-- approved each call and where that approval's events are.
CREATE OR REPLACE VIEW audit_tool_calls AS
 SELECT tool_calls.run_id,
    tool_calls.call_id,
    tool_calls.tool,
    tool_calls.effect,
    tool_calls.once_per_run,
    tool_calls.request_digest,
    tool_calls.args_digest,
    tool_calls.idempotency_key,
    tool_calls.approval_id,
    tool_calls.status,
    tool_calls.attempts,
    tool_calls.worker_id,
    tool_calls.result_digest,
    tool_calls.resolved_by,
    tool_calls.started_at,
    tool_calls.finished_at,
    tool_calls.approved_by,
    tool_calls.approval_stream
   FROM tool_calls;
