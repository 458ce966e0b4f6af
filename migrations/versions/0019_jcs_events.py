"""Events in RFC 8785 (JCS) canonical JSON, under the tag `signoff.event.v2`.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-01

Until now an event's data was Python's sorted JSON text (tag `signoff.event.v1`), which another
language reproduces only by copying Python's number formatting. From this revision on the client
sends RFC 8785 text (`ledger.canonical.jcs_json`) and the append functions hash it under the tag
`signoff.event.v2`; events written before keep their text, their tag and their hashes.

Which form an event is in: `events.tag_version`, of the domain `signoff_tag_version` (a
smallint). Added without a default, so every existing row reads NULL, which means 1, with no
rewrite of the table (instant however large); then its DEFAULT is set to 2, which only rows
inserted from then on take, so the append functions' INSERT needs no change. The domain's check
(added after the column, NOT VALID: the old rows are not scanned) keeps new rows at 2; a domain
rather than a table CHECK for the reason of 0018 (its check is parsed once per session, not once
per insert). Readers use `coalesce(tag_version, 1)`, and so does the auditors' view
`audit_events`, which gets the column (as `tag_version`, 1 or 2).

Why a verifier may trust the column: the tag version picks the tag that starts the canonical
bytes, and the chain hash covers them. Flip an event's recorded version and `ledger verify` (and
the offline verifier, for an export) hashes other bytes than the database did, and reports the
event; the column is never taken on its word. Only event bytes change: the other canonical JSON
(digests of arguments and results, MACs, resume tokens, signed statements) is computed and
checked by Signoff alone, and each already names the key or tag it belongs to, so it keeps
Python's form (`ledger.canonical.canonical_json`). One thing follows for those carried inside
event data (an approval event's MAC, a grant's signature): RFC 8785 writes `1.0` as `1`, which
reads back as an integer, so they are computed over the data as it reads back
(`jcs_read_back`), which is what their checks see; those of older events verify as before.

How the functions change: the append functions (`signoff_append`, `signoff_write_events`, and
any other that hashes events) are read from the catalog, not pasted here, so this revision
changes nothing else in them whatever revision wrote them last. Every function of schema public
whose body holds the literal `'signoff.event.v1'` is taken from `pg_get_functiondef`, the
literal must occur in it exactly as often as the tag's text does at all (one quoted constant per
use, nothing built from pieces), it is replaced by `'signoff.event.v2'`, and the definition is
run again: `pg_get_functiondef` gives CREATE OR REPLACE, which keeps the owner, the grants, the
SECURITY DEFINER and the pinned `search_path`. `signoff_append` must be among them, and no
function may still hold the old tag afterwards. The downgrade does the reverse.

The downgrade refuses while any event of tag version 2 exists: the code of the revision before
knows only tag version 1 and would report every such event as altered.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

from ledger.store.sqlscript import execute_script

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_TAG = "signoff.event.v1"
NEW_TAG = "signoff.event.v2"

COLUMN = """
CREATE DOMAIN signoff_tag_version AS smallint;
ALTER TABLE events ADD COLUMN tag_version signoff_tag_version;
ALTER TABLE events ALTER COLUMN tag_version SET DEFAULT 2;
ALTER DOMAIN signoff_tag_version ADD CONSTRAINT signoff_tag_version_check CHECK (VALUE = 2)
    NOT VALID;
-- Auditors recompute hashes from the view too. CREATE OR REPLACE adds the column at the end and
-- keeps the grants.
CREATE OR REPLACE VIEW audit_events AS
    SELECT position, stream_id, version, type, data, actor, recorded_at, hash,
           coalesce(tag_version, 1)::smallint AS tag_version
    FROM events;
"""

DROP_COLUMN = """
DROP VIEW audit_events;
CREATE VIEW audit_events AS
    SELECT position, stream_id, version, type, data, actor, recorded_at, hash FROM events;
GRANT SELECT ON audit_events TO signoff_auditor;
ALTER TABLE events DROP COLUMN tag_version;
DROP DOMAIN signoff_tag_version;
"""

# Functions only (prokind 'f'), with the quoted tag in their body.
_HASHING = """
SELECT p.proname, pg_get_functiondef(p.oid)
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'public' AND p.prokind = 'f' AND strpos(p.prosrc, :quoted) > 0
ORDER BY p.proname, p.oid
"""


def retagged(name: str, definition: str, old: str, new: str) -> str:
    """`definition` with each quoted `old` tag replaced by `new`.

    Raises:
        RuntimeError: the tag's text occurs in it other than as a quoted constant.
    """
    quoted = f"'{old}'"
    uses = definition.count(quoted)
    if uses == 0 or uses != definition.count(old):
        raise RuntimeError(
            f"{name}: the tag {old} occurs {definition.count(old)} times, {uses} of them as "
            "the constant this revision replaces; change the function by hand"
        )
    return definition.replace(quoted, f"'{new}'")


def _retag(old: str, new: str) -> None:
    bind = op.get_bind()
    found = bind.execute(text(_HASHING), {"quoted": f"'{old}'"}).all()
    names = {name for name, _ in found}
    if "signoff_append" not in names:
        raise RuntimeError(f"signoff_append does not hash events with the tag {old}")
    for name, definition in found:
        execute_script(retagged(name, definition, old, new))
    left = bind.execute(text(_HASHING), {"quoted": f"'{old}'"}).all()
    if left:
        raise RuntimeError(f"still hashing with {old}: {', '.join(n for n, _ in left)}")


def upgrade() -> None:
    execute_script(COLUMN)
    _retag(OLD_TAG, NEW_TAG)


def downgrade() -> None:
    bind = op.get_bind()
    newer = bind.execute(text("SELECT count(*) FROM events WHERE tag_version = 2")).scalar()
    if newer:
        raise RuntimeError(
            f"{newer} events are of tag version 2 ({NEW_TAG}), which the revision before "
            "cannot verify; the journal cannot go back below revision 0019"
        )
    _retag(NEW_TAG, OLD_TAG)
    execute_script(DROP_COLUMN)
