-- What auditors read of the journal, with all a hash needs to be recomputed: `tag_version`
-- says which tag starts the event's canonical bytes.
CREATE OR REPLACE VIEW audit_events AS
 SELECT events."position",
    events.stream_id,
    events.version,
    events.type,
    events.data,
    events.actor,
    events.recorded_at,
    events.hash,
    events.tag_version
   FROM events;
