"""Data keys are written only through functions; a nonce budget per sealing key.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

No role but the owner writes `data_keys` directly any more. The key administrator creates,
rotates, retires and rewraps keys through SECURITY DEFINER functions; every role that seals
(workers, reviewers, key administrators) may only reserve nonces, which adds to one key's
`sealed` counter and nothing else. All of them read the table: they unwrap with their own KEK.

`sealed` counts the messages sealed under a key (AES-256-GCM with random 96-bit nonces is safe
for well under 2^32 messages per key). Processes reserve counts in blocks before they seal, so
a seal costs no round trip; a block reserved by a process that dies is simply lost, which only
makes the count high. The ring refuses to seal past its budget (`ledger.keys.budget`).

The ring appends the key's journal event (`key.created`, ...) in the same transaction as the
function call, so the key administrator also appends to the journal.
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger.store.sqlscript import execute_script

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SEALERS = "signoff_app, signoff_reviewer, signoff_key_admin"
APPEND_SIGNATURE = (
    "signoff_append(text, integer, text[], json[], text[], timestamptz[], bytea[], text)"
)

# Signing purposes hold an Ed25519 key: they carry its 32-byte public half, nothing else does.
# A decision key signs reviewers' decisions, so only a login of the reviewer side (a member of
# `signoff_reviewer`, and `signoff_key_admin` to run the function) makes or rewraps one.
# Sealing purposes are the AES-GCM ones, the only keys with a nonce budget.
FUNCTIONS = """
ALTER TABLE data_keys ADD COLUMN sealed bigint NOT NULL DEFAULT 0 CHECK (sealed >= 0);

CREATE FUNCTION signoff_key_create(
    p_key_id text, p_purpose text, p_kek_id text, p_wrapped bytea, p_public_key bytea
) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF p_purpose = 'decision_signing'
            AND NOT pg_has_role(session_user, 'signoff_reviewer', 'MEMBER') THEN
        RAISE EXCEPTION 'key %: decision keys are the reviewer side''s to make', p_key_id
            USING ERRCODE = '42501';
    END IF;
    IF (CASE WHEN p_purpose IN ('digest_signing', 'decision_signing')
            THEN p_public_key IS NULL OR length(p_public_key) <> 32
            ELSE p_public_key IS NOT NULL END) THEN
        RAISE EXCEPTION 'key %: a % key has a 32-byte public key exactly when it signs',
            p_key_id, p_purpose USING ERRCODE = '22023';
    END IF;
    INSERT INTO data_keys (key_id, purpose, state, kek_id, wrapped, public_key)
        VALUES (p_key_id, p_purpose, 'active', p_kek_id, p_wrapped, p_public_key);
END
$$;

-- Demotes the purpose's active key and creates its successor; returns the demoted key's id.
CREATE FUNCTION signoff_key_rotate(
    p_key_id text, p_purpose text, p_kek_id text, p_wrapped bytea, p_public_key bytea
) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    old text;
BEGIN
    UPDATE data_keys SET state = 'decrypt_only', rotated_at = now()
        WHERE purpose = p_purpose AND state = 'active' RETURNING key_id INTO old;
    PERFORM signoff_key_create(p_key_id, p_purpose, p_kek_id, p_wrapped, p_public_key);
    RETURN old;
END
$$;

-- Retires a decrypt-only key; returns whether it did.
CREATE FUNCTION signoff_key_retire(p_key_id text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    UPDATE data_keys SET state = 'retired', retired_at = now()
        WHERE key_id = p_key_id AND state = 'decrypt_only';
    RETURN FOUND;
END
$$;

CREATE FUNCTION signoff_key_rewrap(p_key_id text, p_kek_id text, p_wrapped bytea) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF (SELECT purpose FROM data_keys WHERE key_id = p_key_id) = 'decision_signing'
            AND NOT pg_has_role(session_user, 'signoff_reviewer', 'MEMBER') THEN
        RAISE EXCEPTION 'key %: decision keys are the reviewer side''s to rewrap', p_key_id
            USING ERRCODE = '42501';
    END IF;
    UPDATE data_keys SET kek_id = p_kek_id, wrapped = p_wrapped WHERE key_id = p_key_id;
    RETURN FOUND;
END
$$;

-- Adds `p_count` (1 to 2^20) to a sealing key's counter and returns the new total: NULL when
-- the key is no sealing key or retired. It never lowers the counter nor touches another column.
CREATE FUNCTION signoff_reserve_nonces(p_key_id text, p_count integer) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    total bigint;
BEGIN
    IF p_count IS NULL OR p_count < 1 OR p_count > 1048576 THEN
        RAISE EXCEPTION 'a nonce reservation is 1 to 1048576 messages, not %', p_count
            USING ERRCODE = '22023';
    END IF;
    UPDATE data_keys SET sealed = sealed + p_count
        WHERE key_id = p_key_id AND state <> 'retired' AND purpose IN ('checkpoint', 'result')
        RETURNING sealed INTO total;
    RETURN total;
END
$$;
"""

GRANTS = f"""
REVOKE ALL ON FUNCTION signoff_key_create(text, text, text, bytea, bytea),
    signoff_key_rotate(text, text, text, bytea, bytea), signoff_key_retire(text),
    signoff_key_rewrap(text, text, bytea), signoff_reserve_nonces(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION signoff_key_create(text, text, text, bytea, bytea),
    signoff_key_rotate(text, text, text, bytea, bytea), signoff_key_retire(text),
    signoff_key_rewrap(text, text, bytea) TO signoff_key_admin;
GRANT EXECUTE ON FUNCTION signoff_reserve_nonces(text, integer) TO {SEALERS};
REVOKE INSERT, UPDATE, DELETE ON data_keys FROM signoff_app;
GRANT SELECT ON data_keys TO {SEALERS};
GRANT SELECT, INSERT ON events TO signoff_key_admin;
GRANT EXECUTE ON FUNCTION {APPEND_SIGNATURE} TO signoff_key_admin;
"""

DOWNGRADE = f"""
REVOKE EXECUTE ON FUNCTION {APPEND_SIGNATURE} FROM signoff_key_admin;
REVOKE SELECT, INSERT ON events FROM signoff_key_admin;
REVOKE SELECT ON data_keys FROM signoff_reviewer, signoff_key_admin;
GRANT SELECT, INSERT, UPDATE ON data_keys TO signoff_app;
DROP FUNCTION signoff_reserve_nonces(text, integer);
DROP FUNCTION signoff_key_rewrap(text, text, bytea);
DROP FUNCTION signoff_key_retire(text);
DROP FUNCTION signoff_key_rotate(text, text, text, bytea, bytea);
DROP FUNCTION signoff_key_create(text, text, text, bytea, bytea);
ALTER TABLE data_keys DROP COLUMN sealed;
"""


def upgrade() -> None:
    execute_script(FUNCTIONS)
    execute_script(GRANTS)


def downgrade() -> None:
    execute_script(DOWNGRADE)
