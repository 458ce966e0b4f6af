"""The tool-call ledger, and a read-only role for auditors.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger.store.sqlscript import execute_script

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# One row per (run, call id): the projection of the stream `call:<run>/<call id>`, plus the
# sealed arguments that run (after an edit, the reviewer's) and the sealed result, kept here
# rather than in the journal (they can be large); the journal holds their digests, so a replaced
# value is detected. `request_digest` is the digest of the arguments the model asked with.
# `lease_until` is renewed by the worker running the call; a lapsed lease means the worker died.
# `waiters` counts processes waiting for the outcome: the worker NOTIFYs only when somebody waits.
UPGRADE = """
CREATE TABLE tool_calls (
    run_id          text NOT NULL,
    call_id         text NOT NULL,
    tool            text NOT NULL,
    effect          text NOT NULL CHECK (effect IN ('read', 'idempotent_write', 'single_attempt')),
    once_per_run    boolean NOT NULL,
    request_digest  text NOT NULL,
    args_digest     text NOT NULL,
    args_sealed     bytea NOT NULL,
    idempotency_key text NOT NULL,
    approval_id     text,
    status          text NOT NULL CHECK (status IN ('running', 'succeeded', 'failed',
                    'outcome_unknown', 'denied', 'responded')),
    attempts        integer NOT NULL,
    worker_id       text NOT NULL,
    lease_until     timestamptz,
    result_digest   text,
    result_sealed   bytea,
    resolved_by     text,
    started_at      timestamptz NOT NULL,
    finished_at     timestamptz,
    waiters         integer NOT NULL DEFAULT 0,
    version         integer NOT NULL,
    PRIMARY KEY (run_id, call_id)
);
CREATE UNIQUE INDEX tool_calls_once_per_run_idx ON tool_calls (run_id, tool) WHERE once_per_run;
CREATE INDEX tool_calls_started_idx ON tool_calls (started_at);
CREATE INDEX tool_calls_running_idx ON tool_calls (lease_until) WHERE status = 'running';
GRANT SELECT, INSERT, UPDATE ON tool_calls TO signoff_app;

-- Auditors read these views and nothing else: no keys, no ciphertexts, no writes.
CREATE VIEW audit_events AS
    SELECT position, stream_id, version, type, data, actor, recorded_at, hash FROM events;
CREATE VIEW audit_tool_calls AS
    SELECT run_id, call_id, tool, effect, once_per_run, request_digest, args_digest,
           idempotency_key,
           approval_id, status, attempts, worker_id, result_digest, resolved_by, started_at,
           finished_at
    FROM tool_calls;
CREATE VIEW audit_approvals AS
    SELECT approval_id, run_id, thread_id, tool, kind, call_id, args_digest, binding,
           requested_by, policy, status, decided_by, decided_at, expires_at, consumed_by,
           consumed_at, requested_at
    FROM approvals;
DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'signoff_auditor') THEN
        CREATE ROLE signoff_auditor NOLOGIN;
    END IF;
END $$;
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM signoff_auditor;
GRANT USAGE ON SCHEMA public TO signoff_auditor;
GRANT SELECT ON audit_events, audit_tool_calls, audit_approvals TO signoff_auditor;
"""

DOWNGRADE = """
DROP VIEW audit_approvals;
DROP VIEW audit_tool_calls;
DROP VIEW audit_events;
DROP TABLE tool_calls;
"""


def upgrade() -> None:
    execute_script(UPGRADE)


def downgrade() -> None:
    execute_script(DOWNGRADE)
