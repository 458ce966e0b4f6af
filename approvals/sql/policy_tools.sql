-- The tools agent workers run, with the JSON Schema of their arguments: a policy set is
-- validated against the Cedar schema made from them when it is published. Workers register
-- their tools (signoff_register_tool); the latest registration of a name counts. Not evidence:
-- the schema a set was validated against is part of that set's signed event.
CREATE TABLE policy_tools (
    tool text NOT NULL,
    effect text NOT NULL,
    args_schema jsonb NOT NULL,
    registered_by text NOT NULL,
    registered_at timestamp with time zone NOT NULL,
    CONSTRAINT policy_tools_pkey PRIMARY KEY (tool),
    CONSTRAINT policy_tools_tool_check CHECK (((tool <> ''::text) AND (length(tool) <= 200))),
    CONSTRAINT policy_tools_effect_check CHECK ((effect = ANY (ARRAY['read'::text,
        'idempotent_write'::text, 'single_attempt'::text]))),
    CONSTRAINT policy_tools_args_schema_check CHECK ((jsonb_typeof(args_schema) = 'object'::text))
);
