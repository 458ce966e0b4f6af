"""API tokens: how reviewers and auditors authenticate to `signoff serve`.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01

A token is `sgf_<token id>_<secret>`, shown once when it is made; the table keeps only the
SHA-256 of the secret. Making and revoking tokens is an administrator's (the owner's): the row
and its `token.created` / `token.revoked` event (stream `token:<id>`, no secret or hash in it)
are written in one transaction, and no other role may write the table or append to a token's
stream (`signoff_append` now guards `token:` streams as it guards approvals'). The service's
login never reads the table: it calls `signoff_token_use`, which checks the hash, revocation and
expiry, stamps `last_used_at` and returns who the token is for; `signoff_api_tokens_active`
tells it how many tokens could authenticate (it refuses to start with none). `last_used_at` is
not history (no event), like a call's lease. Auditors read `audit_api_tokens`, without the hashes.
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger.store.sqlscript import execute_script, load_revision

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# `reviewer` is normalised by `approvals.identity.reviewer_id`; the checks are a backstop.
TABLE = """
CREATE TABLE api_tokens (
    token_id     text PRIMARY KEY CHECK (token_id ~ '^[a-z0-9]{8,64}$'),
    secret_hash  bytea NOT NULL CHECK (octet_length(secret_hash) = 32),
    reviewer     text NOT NULL
                 CHECK (reviewer <> '' AND length(reviewer) <= 128
                        AND reviewer !~ '[[:space:][:cntrl:]]'),
    scope        text NOT NULL CHECK (scope IN ('reviewer', 'auditor')),
    created_by   text NOT NULL,
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL CHECK (expires_at > created_at),
    revoked_at   timestamptz,
    last_used_at timestamptz
);
CREATE VIEW audit_api_tokens AS
    SELECT token_id, reviewer, scope, created_by, created_at, expires_at, revoked_at,
           last_used_at
    FROM api_tokens;
GRANT SELECT ON audit_api_tokens TO signoff_auditor;
"""

# One row per call: `status` says why a token is refused (callers show one message outward);
# revoked and expired are told only to whoever holds the secret.
TOKEN_USE = """
CREATE FUNCTION signoff_token_use(p_token_id text, p_secret_hash bytea)
RETURNS TABLE (status text, reviewer text, scope text, expires_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    t api_tokens;
    at timestamptz := clock_timestamp();
BEGIN
    SELECT * INTO t FROM api_tokens a WHERE a.token_id = p_token_id;
    IF NOT FOUND OR p_secret_hash IS NULL OR t.secret_hash <> p_secret_hash THEN
        RETURN QUERY SELECT 'invalid'::text, NULL::text, NULL::text, NULL::timestamptz;
    ELSIF t.revoked_at IS NOT NULL THEN
        RETURN QUERY SELECT 'revoked'::text, t.reviewer, t.scope, t.expires_at;
    ELSIF t.expires_at <= at THEN
        RETURN QUERY SELECT 'expired'::text, t.reviewer, t.scope, t.expires_at;
    ELSE
        UPDATE api_tokens a SET last_used_at = at WHERE a.token_id = p_token_id;
        RETURN QUERY SELECT 'valid'::text, t.reviewer, t.scope, t.expires_at;
    END IF;
END
$$;
-- Whether the service has anyone to let in (it refuses to start otherwise): a count, no ids.
CREATE FUNCTION signoff_api_tokens_active() RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT count(*) FROM api_tokens WHERE revoked_at IS NULL AND expires_at > now()
$$;
REVOKE EXECUTE ON FUNCTION signoff_token_use(text, bytea) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION signoff_api_tokens_active() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_token_use(text, bytea), signoff_api_tokens_active()
    TO signoff_reviewer, signoff_auditor;
"""

_GUARDED = "'^(approval|call|reviewer|grant):'"
_GUARDED_WITH_TOKENS = "'^(approval|call|reviewer|grant|token):'"


def _append_function() -> str:
    """0010's `signoff_append` alone (CREATE OR REPLACE keeps its grants)."""
    text: str = load_revision(__file__, "0010_least_privilege").APPEND
    start = text.index("CREATE FUNCTION signoff_append(")
    body = text[start:]
    if body.count(_GUARDED) != 1:
        raise RuntimeError("0010's signoff_append changed: its guarded streams are not found")
    return body.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


def upgrade() -> None:
    execute_script(TABLE)
    execute_script(TOKEN_USE)
    execute_script(_append_function().replace(_GUARDED, _GUARDED_WITH_TOKENS))


def downgrade() -> None:
    execute_script(_append_function())
    execute_script(
        """
        DROP FUNCTION signoff_api_tokens_active();
        DROP FUNCTION signoff_token_use(text, bytea);
        DROP VIEW audit_api_tokens;
        DROP TABLE api_tokens;
        """
    )
