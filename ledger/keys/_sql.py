"""The key ring's queries, in one place. Every write to `data_keys` goes through the
database's SECURITY DEFINER key functions (`ledger/keys/sql/`)."""

SELECT_KEYS = """
SELECT key_id, purpose, state, kek_id, wrapped, public_key, created_at, rotated_at, retired_at,
       sealed
FROM data_keys ORDER BY created_at, key_id
"""
SELECT_ACTIVE = "SELECT key_id FROM data_keys WHERE purpose = $1 AND state = 'active'"
CREATE = "SELECT signoff_key_create($1, $2, $3, $4, $5)"
ROTATE = "SELECT signoff_key_rotate($1, $2, $3, $4, $5)"  # returns the demoted key's id
RETIRE = "SELECT signoff_key_retire($1)"
REWRAP = "SELECT signoff_key_rewrap($1, $2, $3)"
RESERVE = """
SELECT r.key_id, r.n, signoff_reserve_nonces(r.key_id, r.n) AS total
FROM unnest($1::text[], $2::integer[]) AS r(key_id, n)
"""
MAY_ROTATE = """
SELECT has_function_privilege(
    'public.signoff_key_rotate(text, text, text, bytea, bytea)', 'EXECUTE')
"""

ACTIVE_PURPOSES = "SELECT purpose FROM data_keys WHERE state = 'active'"
PURPOSE_AND_STATE = "SELECT purpose, state FROM data_keys WHERE key_id = $1"
