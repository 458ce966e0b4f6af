CREATE OR REPLACE FUNCTION public.signoff_refuse_change()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
    RAISE EXCEPTION 'the journal is append-only: % on % is refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'SG403',
              DETAIL = json_build_object('table', TG_TABLE_NAME, 'operation', TG_OP)::text;
END
$function$;
