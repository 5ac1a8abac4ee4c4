-- Every change to the workflow or task definitions is announced on the channel
-- `weft_definitions` (delivered when the change commits): gateways cache the resolved
-- definition of each start and drop it when they hear of a change
-- (docs/definition-cache.md). A statement trigger, so that any writer — Weft or SQL by
-- hand — is heard.
CREATE FUNCTION weft_definitions_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('weft_definitions', TG_TABLE_NAME);
    RETURN NULL;
END
$$;

CREATE TRIGGER definitions_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON definitions
    FOR EACH STATEMENT EXECUTE FUNCTION weft_definitions_changed();

CREATE TRIGGER task_definitions_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON task_definitions
    FOR EACH STATEMENT EXECUTE FUNCTION weft_definitions_changed();
