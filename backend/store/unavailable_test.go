package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
)

// sqlStateError is a driver error with a SQLSTATE, as pgx's PgError.
type sqlStateError string

func (e sqlStateError) Error() string    { return "ERROR (SQLSTATE " + string(e) + ")" }
func (e sqlStateError) SQLState() string { return string(e) }

func TestUnavailable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{fmt.Errorf("list orders: %w", context.DeadlineExceeded), true},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{fmt.Errorf("write: %w", syscall.EPIPE), true},
		{fmt.Errorf("query: %w", sqlStateError("08006")), true},
		{fmt.Errorf("query: %w", sqlStateError("57P01")), true},
		{fmt.Errorf("query: %w", sqlStateError("57P03")), true},
		{fmt.Errorf("insert: %w", sqlStateError("23505")), false}, // unique violation: a bug or a race, not an outage
		{fmt.Errorf("query: %w", sqlStateError("42P01")), false},
		{fmt.Errorf("get: %w", ErrNotFound), false},
		{errors.New("scan: converting NULL to string"), false},
		{context.Canceled, false},
		{nil, false},
	} {
		if got := Unavailable(c.err); got != c.want {
			t.Errorf("Unavailable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
