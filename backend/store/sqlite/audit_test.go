package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vendorgate/backend/store"
)

// TestAuditRecordsRefuseUpdate: even SQL that bypasses the Store cannot
// change an audit record; deleting one (retention) still works.
func TestAuditRecordsRefuseUpdate(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "audit.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	at := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	if err := s.AppendAudit(ctx, &store.AuditRecord{ID: "a1", At: at, Actor: "ops", Action: "order.deleted", OrderID: "o1"}); err != nil {
		t.Fatal(err)
	}
	_, err = s.db.ExecContext(ctx, "UPDATE audit_log SET actor = 'someone else' WHERE id = 'a1'")
	if err == nil || !strings.Contains(err.Error(), "append-only") {
		t.Fatalf("UPDATE of an audit record: %v, want it refused as append-only", err)
	}
	rs, err := s.ListAudit(ctx, store.AuditFilter{Limit: 5})
	if err != nil || len(rs) != 1 || rs[0].Actor != "ops" {
		t.Fatalf("after the refused UPDATE: %+v, %v", rs, err)
	}
	if n, err := s.DeleteAuditBefore(ctx, at.Add(time.Second)); err != nil || n != 1 {
		t.Fatalf("retention delete: %d, %v", n, err)
	}
}
