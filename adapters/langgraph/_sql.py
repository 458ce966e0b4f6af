"""The SQL of `adapters.langgraph`, in one place: the statements its modules run."""

# _copy.py
CHECKPOINTS = """
SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata
FROM checkpoints WHERE thread_id = %s ORDER BY checkpoint_ns, checkpoint_id
"""

BLOBS = """
SELECT checkpoint_ns, channel, version, type, blob
FROM checkpoint_blobs WHERE thread_id = %s ORDER BY checkpoint_ns, channel, version
"""

WRITES = """
SELECT checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob
FROM checkpoint_writes WHERE thread_id = %s ORDER BY checkpoint_ns, checkpoint_id, task_id, idx
"""


# reencrypt.py
# A tag's key id is what follows "+signoff:"; NULL means plaintext (see `_envelope`).
TAG_KEY = "CASE WHEN strpos(type, '+signoff:') > 0 THEN split_part(type, '+signoff:', 2) END"

SELECT_BLOBS = f"""
SELECT thread_id, checkpoint_ns, channel, version, type, blob FROM checkpoint_blobs
WHERE (thread_id, checkpoint_ns, channel, version) > (%(k0)s, %(k1)s, %(k2)s, %(k3)s)
AND coalesce({TAG_KEY} <> %(active)s, %(plaintext)s)
ORDER BY thread_id, checkpoint_ns, channel, version LIMIT %(limit)s
"""

UPDATE_BLOBS = """
UPDATE checkpoint_blobs AS b SET type = u.new_type, blob = u.new_blob
FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::bytea[],
            %s::text[], %s::bytea[])
    AS u(thread_id, checkpoint_ns, channel, version, old_type, old_blob, new_type, new_blob)
WHERE b.thread_id = u.thread_id AND b.checkpoint_ns = u.checkpoint_ns
AND b.channel = u.channel AND b.version = u.version
AND b.type IS NOT DISTINCT FROM u.old_type AND b.blob IS NOT DISTINCT FROM u.old_blob
"""

SELECT_WRITES = f"""
SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, type, blob
FROM checkpoint_writes
WHERE (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
    > (%(k0)s, %(k1)s, %(k2)s, %(k3)s, %(k4)s)
AND coalesce({TAG_KEY} <> %(active)s, %(plaintext)s)
ORDER BY thread_id, checkpoint_ns, checkpoint_id, task_id, idx LIMIT %(limit)s
"""

UPDATE_WRITES = """
UPDATE checkpoint_writes AS w SET type = u.new_type, blob = u.new_blob
FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::int[], %s::text[], %s::bytea[],
            %s::text[], %s::bytea[])
    AS u(thread_id, checkpoint_ns, checkpoint_id, task_id, idx, old_type, old_blob,
         new_type, new_blob)
WHERE w.thread_id = u.thread_id AND w.checkpoint_ns = u.checkpoint_ns
AND w.checkpoint_id = u.checkpoint_id AND w.task_id = u.task_id AND w.idx = u.idx
AND w.type IS NOT DISTINCT FROM u.old_type AND w.blob = u.old_blob
"""

# A plaintext checkpoint's `true` values with a blob behind them are DeltaChannel snapshot
# markers (LangGraph's saver tells them from a plain True the same way).
SELECT_CHECKPOINTS = """
SELECT c.thread_id, c.checkpoint_ns, c.checkpoint_id,
    c.checkpoint::text AS checkpoint, c.metadata::text AS metadata,
    CASE WHEN NOT c.checkpoint ? '__signoff' THEN ARRAY(
        SELECT v.key FROM jsonb_each(c.checkpoint -> 'channel_values') AS v
        WHERE v.value = 'true'::jsonb AND EXISTS (
            SELECT 1 FROM checkpoint_blobs b
            WHERE b.thread_id = c.thread_id AND b.checkpoint_ns = c.checkpoint_ns
            AND b.channel = v.key AND b.version = c.checkpoint -> 'channel_versions' ->> v.key
        )
    ) END AS snapshot_channels
FROM checkpoints AS c
WHERE (c.thread_id, c.checkpoint_ns, c.checkpoint_id) > (%(k0)s, %(k1)s, %(k2)s)
AND CASE WHEN c.checkpoint ? '__signoff' AND c.metadata ? '__signoff'
    THEN c.checkpoint #>> '{__signoff,kid}' IS DISTINCT FROM %(active)s
        OR c.metadata #>> '{__signoff,kid}' IS DISTINCT FROM %(active)s
    ELSE %(plaintext)s END
ORDER BY c.thread_id, c.checkpoint_ns, c.checkpoint_id LIMIT %(limit)s
"""

UPDATE_CHECKPOINTS = """
UPDATE checkpoints AS c SET checkpoint = u.new_checkpoint::jsonb, metadata = u.new_metadata::jsonb
FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[])
    AS u(thread_id, checkpoint_ns, checkpoint_id, old_checkpoint, old_metadata,
         new_checkpoint, new_metadata)
WHERE c.thread_id = u.thread_id AND c.checkpoint_ns = u.checkpoint_ns
AND c.checkpoint_id = u.checkpoint_id
AND c.checkpoint = u.old_checkpoint::jsonb AND c.metadata = u.old_metadata::jsonb
"""

KEY_USAGE = f"""
SELECT 'checkpoints' AS tbl, checkpoint #>> '{{__signoff,kid}}' AS key_id, count(*) AS n
FROM checkpoints GROUP BY 2
UNION ALL SELECT 'checkpoint_blobs', {TAG_KEY}, count(*) FROM checkpoint_blobs GROUP BY 2
UNION ALL SELECT 'checkpoint_writes', {TAG_KEY}, count(*) FROM checkpoint_writes GROUP BY 2
"""
