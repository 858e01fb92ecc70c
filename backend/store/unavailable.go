package store

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
)

// Unavailable reports whether err says the database could not be reached
// or went away, rather than that a call was wrong: the connection was
// refused, reset or closed, the pool could not connect, the server is
// shutting down or starting up, or the call ran out of its time. Such a
// request answers 503 with Retry-After, as a dependency that is down does,
// not 500 internal_error, which says a bug. It looks only at the standard
// library's errors and at a driver error's SQLSTATE (any error with a
// SQLState method, as pgx's *pgconn.PgError has), so that the answer does
// not depend on which store is in use.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true // dial refused or timed out, read or write on a dead connection
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) {
		return true
	}
	var coded interface{ SQLState() string }
	if errors.As(err, &coded) {
		switch s := coded.SQLState(); {
		case strings.HasPrefix(s, "08"): // connection exception
			return true
		case s == "57P01", s == "57P02", s == "57P03": // admin shutdown, crash shutdown, cannot connect now
			return true
		case s == "53300": // too many connections
			return true
		}
	}
	return false
}
