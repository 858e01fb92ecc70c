package logctx

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
)

func TestRequestIDOnLinesOfItsContext(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewHandler(slog.NewJSONHandler(&buf, nil))).With("part", "orders")
	log.InfoContext(WithRequestID(context.Background(), "rid-1"), "order placed", "order_id", "o1")
	log.InfoContext(context.Background(), "no request")
	log.Info("no context")
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	if len(lines) != 3 {
		t.Fatalf("%d lines:\n%s", len(lines), buf.String())
	}
	want := []string{"rid-1", "", ""}
	for i, l := range lines {
		var m map[string]any
		if err := json.Unmarshal(l, &m); err != nil {
			t.Fatal(err)
		}
		got, _ := m["request_id"].(string)
		if got != want[i] || m["part"] != "orders" {
			t.Errorf("line %d: request_id %q part %v, want %q: %s", i, got, m["part"], want[i], l)
		}
	}
}
