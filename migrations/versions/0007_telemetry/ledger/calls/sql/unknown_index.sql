-- The calls waiting for a person's resolution (`outcome_unknown`), by when they became so: few
-- at any time among every call ever made, and `signoff serve` counts them on each scrape.
CREATE INDEX tool_calls_unknown_idx ON tool_calls (finished_at)
    WHERE ((status)::text = 'outcome_unknown'::text);
