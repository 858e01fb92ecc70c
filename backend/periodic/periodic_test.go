package periodic

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestRunReturnsCountAndLogsFailure(t *testing.T) {
	var log bytes.Buffer
	l := New(time.Hour, func(ctx context.Context) (int, error) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("a run has no deadline")
		}
		return 3, errors.New("boom")
	}, slog.New(slog.NewTextHandler(&log, nil)), "job run")
	if n := l.Run(); n != 3 {
		t.Fatalf("Run = %d, want 3", n)
	}
	if !strings.Contains(log.String(), "job run") || !strings.Contains(log.String(), "boom") {
		t.Fatalf("the failure is not logged: %q", log.String())
	}
}

func TestStartRunsUntilClose(t *testing.T) {
	var runs atomic.Int32
	l := New(time.Millisecond, func(context.Context) (int, error) { runs.Add(1); return 0, nil }, slog.Default(), "job")
	l.Start()
	deadline := time.Now().Add(5 * time.Second)
	for runs.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	l.Close()
	l.Close() // a second Close is harmless
	if n := runs.Load(); n < 2 {
		t.Fatalf("%d runs after Start", n)
	}
}
