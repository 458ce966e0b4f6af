-- The trigger function that makes the journal append-only: an UPDATE, DELETE or TRUNCATE of
-- `events` fails with SG403. Clients type errors by SQLSTATE alone (`ledger.errors`), so DETAIL
-- says what the refusal is about as a JSON object: the table and the refused operation.
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
