-- Registers (or registers again) one tool a worker runs, with its arguments' JSON Schema; the
-- login that registered it is recorded. Schemas of more than 64 KiB are refused.
CREATE OR REPLACE FUNCTION public.signoff_register_tool(p_tool text, p_effect text, p_args_schema jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
BEGIN
    IF octet_length(p_args_schema::text) > 65536 THEN
        RAISE EXCEPTION 'the arguments schema of tool % is larger than 64 KiB', p_tool
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO policy_tools AS t (tool, effect, args_schema, registered_by, registered_at)
        VALUES (p_tool, p_effect, p_args_schema, session_user, now())
        ON CONFLICT (tool) DO UPDATE SET effect = EXCLUDED.effect,
            args_schema = EXCLUDED.args_schema, registered_by = EXCLUDED.registered_by,
            registered_at = EXCLUDED.registered_at
        WHERE (t.effect, t.args_schema) IS DISTINCT FROM (EXCLUDED.effect, EXCLUDED.args_schema);
END
$function$;
