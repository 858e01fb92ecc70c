-- The audit trail: one row per admin action or report download, ids only
-- (never driver data), appended and never changed: an UPDATE is refused
-- here; rows leave only by retention (DELETE of those older than it).
-- An id that does not apply is ''. seq orders the records written at the
-- same instant as they were written.
CREATE TABLE audit_log (
    seq        bigserial PRIMARY KEY,
    id         text NOT NULL UNIQUE,
    at         timestamptz NOT NULL,
    actor      text NOT NULL,
    action     text NOT NULL,
    vendor_id  text NOT NULL,
    key_id     text NOT NULL,
    order_id   text NOT NULL,
    service    text NOT NULL,
    address    text NOT NULL,
    request_id text NOT NULL
);
CREATE INDEX audit_log_at ON audit_log (at);
CREATE INDEX audit_log_vendor ON audit_log (vendor_id, at) WHERE vendor_id <> '';
CREATE INDEX audit_log_order ON audit_log (order_id, at) WHERE order_id <> '';
CREATE FUNCTION audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit records are append-only';
END;
$$;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_append_only();
