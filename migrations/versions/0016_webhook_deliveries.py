"""Webhook deliveries: what `signoff serve` posts, to where, and how each attempt went.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-01

One row per journal event and target URL, unique on the two, so however many replicas of the
service see an event, it is delivered once. The service's login (`signoff_reviewer`) neither
reads nor writes the table (people hold reviewers' logins too, and a URL's path is often its
secret: Slack's incoming webhooks); it calls

- `signoff_webhook_latest`: the newest journal position recorded for a target, where the
  service goes on from when it starts;
- `signoff_webhook_record`: a delivery for each of some journal events, which must be
  `approval.requested` or `call.outcome_unknown` events of the journal (nothing else can be
  made a delivery); an event already recorded for that target is left as it is;
- `signoff_webhook_claim`: up to `p_limit` due deliveries of one target, each leased for
  `p_lease_seconds` (`leased_until`), taken with FOR UPDATE SKIP LOCKED so that replicas
  claiming at once take different rows, and a leased row is claimed again only once its lease
  has lapsed (its holder died mid-attempt);
- `signoff_webhook_attempted`: one attempt's result, by the lease's holder alone (a claim's
  `leased_until` fences it): delivered, or due again in `p_retry_seconds`, or (NULL) given up.

The times are the database's. Auditors read `audit_webhook_deliveries`, whose target is the
URL's host and port only.
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger.store.sqlscript import execute_script

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DEFINER = "SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp"

TABLE = """
CREATE TABLE webhook_deliveries (
    delivery_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    position        bigint NOT NULL,
    kind            text NOT NULL
                    CHECK (kind IN ('approval.requested', 'call.outcome_unknown')),
    target          text NOT NULL CHECK (target ~ '^https?://' AND length(target) <= 2048),
    attempts        integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at timestamptz,  -- NULL: no attempt is due (delivered, or given up)
    leased_until    timestamptz,
    last_status     integer,      -- the HTTP status of the last attempt (NULL: no answer)
    last_error      text CHECK (length(last_error) <= 500),
    delivered_at    timestamptz,
    created_at      timestamptz NOT NULL,
    CONSTRAINT webhook_deliveries_position_target_key UNIQUE (position, target)
);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (target, next_attempt_at)
    WHERE next_attempt_at IS NOT NULL;
CREATE VIEW audit_webhook_deliveries AS
    SELECT delivery_id, position, kind,
           substring(target FROM '^https?://(?:[^/?#@]*@)?([^/?#]*)') AS target_host,
           attempts, next_attempt_at, last_status, last_error, delivered_at, created_at
    FROM webhook_deliveries;
GRANT SELECT ON audit_webhook_deliveries TO signoff_auditor;
"""

FUNCTIONS = f"""
CREATE FUNCTION signoff_webhook_latest(p_target text) RETURNS bigint
LANGUAGE sql STABLE {_DEFINER} AS $$
    SELECT max(position) FROM webhook_deliveries WHERE target = p_target
$$;
CREATE FUNCTION signoff_webhook_record(p_positions bigint[], p_target text)
RETURNS integer
LANGUAGE plpgsql {_DEFINER} AS $$
DECLARE
    made integer;
BEGIN
    INSERT INTO webhook_deliveries (position, kind, target, next_attempt_at, created_at)
        SELECT e.position, e.type, p_target, clock_timestamp(), clock_timestamp()
        FROM events e
        WHERE e.position = ANY (p_positions)
          AND e.type IN ('approval.requested', 'call.outcome_unknown')
        ORDER BY e.position
        ON CONFLICT (position, target) DO NOTHING;
    GET DIAGNOSTICS made = ROW_COUNT;
    RETURN made;
END
$$;
CREATE FUNCTION signoff_webhook_claim(p_target text, p_limit integer,
                                      p_lease_seconds double precision)
RETURNS SETOF webhook_deliveries
LANGUAGE plpgsql {_DEFINER} AS $$
DECLARE
    at timestamptz := clock_timestamp();
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_lease_seconds IS NULL OR p_lease_seconds <= 0 THEN
        RAISE EXCEPTION 'a claim needs a limit and a lease of more than 0'
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY UPDATE webhook_deliveries d
        SET leased_until = at + make_interval(secs => p_lease_seconds)
        WHERE d.delivery_id IN (
            SELECT w.delivery_id FROM webhook_deliveries w
            WHERE w.target = p_target AND w.next_attempt_at <= at
              AND (w.leased_until IS NULL OR w.leased_until <= at)
            ORDER BY w.next_attempt_at, w.delivery_id
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED)
        RETURNING d.*;
END
$$;
CREATE FUNCTION signoff_webhook_attempted(
    p_id bigint, p_lease timestamptz, p_status integer, p_error text, p_delivered boolean,
    p_retry_seconds double precision
) RETURNS boolean
LANGUAGE plpgsql {_DEFINER} AS $$
DECLARE
    at timestamptz := clock_timestamp();
BEGIN
    UPDATE webhook_deliveries d SET
        attempts = d.attempts + 1,
        last_status = p_status,
        last_error = left(p_error, 500),
        leased_until = NULL,
        delivered_at = CASE WHEN p_delivered THEN at END,
        next_attempt_at = CASE
            WHEN p_delivered OR p_retry_seconds IS NULL THEN NULL
            ELSE at + make_interval(secs => greatest(p_retry_seconds, 0)) END
        WHERE d.delivery_id = p_id AND d.leased_until = p_lease AND d.delivered_at IS NULL;
    RETURN FOUND;
END
$$;
REVOKE EXECUTE ON FUNCTION signoff_webhook_latest(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION signoff_webhook_record(bigint[], text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION signoff_webhook_claim(text, integer, double precision) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION signoff_webhook_attempted(
    bigint, timestamptz, integer, text, boolean, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_webhook_latest(text),
    signoff_webhook_record(bigint[], text),
    signoff_webhook_claim(text, integer, double precision),
    signoff_webhook_attempted(bigint, timestamptz, integer, text, boolean, double precision)
    TO signoff_reviewer;
"""


def upgrade() -> None:
    execute_script(TABLE)
    execute_script(FUNCTIONS)


def downgrade() -> None:
    execute_script(
        """
        DROP FUNCTION signoff_webhook_attempted(
            bigint, timestamptz, integer, text, boolean, double precision);
        DROP FUNCTION signoff_webhook_claim(text, integer, double precision);
        DROP FUNCTION signoff_webhook_record(bigint[], text);
        DROP FUNCTION signoff_webhook_latest(text);
        DROP VIEW audit_webhook_deliveries;
        DROP TABLE webhook_deliveries;
        """
    )
