// Package serverlog is the fasthttp.Logger both binaries give their
// servers. fasthttp logs a request it cannot parse with the request's own
// bytes (its error text quotes the read buffer, headers and all), so an API
// key or the internal token in a malformed request would reach the log.
// Printer never logs a formatted argument: it logs what kind of error
// happened and the peer it came from.
package serverlog

import (
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"
)

// Printer routes fasthttp's own log lines to slog without the request
// bytes they carry.
type Printer struct{ Log *slog.Logger }

var _ fasthttp.Logger = Printer{}

// connErrorFormat is the line fasthttp's worker writes when serving a
// connection failed (its arguments: local address, peer, error).
const connErrorFormat = "error when serving connection %q<->%q: %v"

// Printf logs a failed connection as "malformed request" or "connection
// error" with the peer, the listener and the error's kind; any other line
// as its constant format with its addresses and numbers. Strings and error
// texts are dropped: they may quote the request.
func (p Printer) Printf(format string, args ...any) {
	if format == connErrorFormat && len(args) == 3 {
		err, _ := args[2].(error)
		msg, kind := Classify(err)
		p.Log.Warn(msg, "kind", kind, "peer", addrString(args[1]), "listener", addrString(args[0]))
		return
	}
	attrs := make([]any, 0, 2+2*len(args))
	attrs = append(attrs, "event", format)
	for i, a := range args {
		key := "arg" + strconv.Itoa(i)
		switch v := a.(type) {
		case net.Addr:
			attrs = append(attrs, key, v.String())
		case int, int64, uint, uint32, uint64, float64:
			attrs = append(attrs, key, v)
		case error:
			_, kind := Classify(v)
			attrs = append(attrs, key, kind)
		}
	}
	p.Log.Warn("http server", attrs...)
}

func addrString(a any) string {
	if v, ok := a.(net.Addr); ok {
		return v.String()
	}
	return ""
}

// kinds maps a phrase of fasthttp's error text to a kind that is safe to
// log; the first that matches wins. Only these fixed words are ever logged.
var kinds = []struct{ phrase, kind string }{
	{"missing colon", "malformed header line"},
	{"malformed mime header", "malformed header line"},
	{"invalid header", "malformed header line"},
	{"content-length", "bad content-length"},
	{"transfer-encoding", "bad transfer-encoding"},
	{"http version", "unsupported http version"},
	{"request method", "malformed request line"},
	{"request uri", "malformed request line"},
	{"first line", "malformed request line"},
	{"whitespace", "malformed request line"},
	{"host", "bad host header"},
	{"trailer", "bad trailer"},
	{"chunk", "bad chunked body"},
	{"body size exceeds", "body too large"},
	{"small read buffer", "headers too large"},
}

// Classify names err for a log line: msg is "malformed request" when the
// client sent something fasthttp could not parse, "connection error"
// otherwise; kind is one of a fixed set of words. Neither ever holds the
// error's own text.
func Classify(err error) (msg, kind string) {
	if err == nil {
		return "connection error", "unknown"
	}
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		return "malformed request", "body too large"
	case errors.As(err, &ne) && ne.Timeout():
		return "connection error", "timeout"
	}
	// fasthttp quotes what it read (%q); match only the words before the
	// first quote, so a request cannot choose its own kind.
	text, _, _ := strings.Cut(strings.ToLower(err.Error()), `"`)
	reading := strings.HasPrefix(text, "error when reading request")
	for _, k := range kinds {
		if strings.Contains(text, k.phrase) {
			if reading || k.kind == "body too large" {
				return "malformed request", k.kind
			}
			return "connection error", k.kind
		}
	}
	switch {
	case strings.HasPrefix(text, "error when reading request headers"):
		return "malformed request", "malformed headers"
	case strings.HasPrefix(text, "error when reading request body"):
		return "malformed request", "malformed body"
	case strings.Contains(text, "reset by peer"), strings.Contains(text, "broken pipe"), strings.Contains(text, "eof"):
		return "connection error", "closed by peer"
	}
	return "connection error", "other"
}
