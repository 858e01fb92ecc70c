-- The audit trail: one row per admin action or report download, ids only
-- (never driver data), appended and never changed: an UPDATE is refused
-- here; rows leave only by retention (DELETE of those older than it).
-- at is Unix nanoseconds; an id that does not apply is ''. seq orders the
-- records written at the same instant as they were written.
CREATE TABLE audit_log (
    seq        INTEGER PRIMARY KEY,
    id         TEXT NOT NULL UNIQUE,
    at         INTEGER NOT NULL,
    actor      TEXT NOT NULL,
    action     TEXT NOT NULL,
    vendor_id  TEXT NOT NULL,
    key_id     TEXT NOT NULL,
    order_id   TEXT NOT NULL,
    service    TEXT NOT NULL,
    address    TEXT NOT NULL,
    request_id TEXT NOT NULL
);
CREATE INDEX audit_log_at ON audit_log(at);
CREATE INDEX audit_log_vendor ON audit_log(vendor_id, at) WHERE vendor_id <> '';
CREATE INDEX audit_log_order ON audit_log(order_id, at) WHERE order_id <> '';
CREATE TRIGGER audit_log_append_only BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit records are append-only');
END;
