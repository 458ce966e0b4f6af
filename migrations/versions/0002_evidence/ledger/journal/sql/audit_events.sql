-- What auditors read of the journal, with all a hash needs to be recomputed: `tag_version`
-- says which tag starts the event's canonical bytes; `login` is the database login that wrote
-- the event (tag 3; none for tag 2, written before it was recorded), which the hash covers.
CREATE OR REPLACE VIEW audit_events AS
 SELECT events."position",
    events.stream_id,
    events.version,
    events.type,
    events.data,
    events.actor,
    events.recorded_at,
    events.hash,
    events.tag_version,
    events.login
   FROM events;
