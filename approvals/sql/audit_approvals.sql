-- What auditors read of approvals: the request, its policy, its status, who decided and who
-- consumed it; not the reviews, the thread config or the version.
CREATE OR REPLACE VIEW audit_approvals AS
 SELECT approvals.approval_id,
    approvals.run_id,
    approvals.thread_id,
    approvals.tool,
    approvals.kind,
    approvals.call_id,
    approvals.args_digest,
    approvals.binding,
    approvals.requested_by,
    approvals.policy,
    approvals.status,
    approvals.decided_by,
    approvals.decided_at,
    approvals.expires_at,
    approvals.consumed_by,
    approvals.consumed_at,
    approvals.requested_at
   FROM approvals;
