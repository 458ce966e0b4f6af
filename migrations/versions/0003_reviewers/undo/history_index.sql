DROP INDEX approvals_decided_idx;
