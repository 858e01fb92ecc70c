// Package logctx carries a request's id in its context.Context, and wraps a
// slog.Handler so that every line logged with that context (InfoContext,
// LogAttrs with ctx) names the request: the domain code below a handler
// logs what happened without being handed the id, and one request can be
// followed from the gateway's access log through the backend's lines.
package logctx

import (
	"context"
	"log/slog"
)

type requestIDKey struct{}

// WithRequestID returns ctx carrying the request id id ("" leaves ctx as it is).
func WithRequestID(ctx context.Context, id string) context.Context {
	if id == "" {
		return ctx
	}
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID is the request id ctx carries, "" when none.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// Handler adds request_id to each record whose context carries one.
type Handler struct{ slog.Handler }

// NewHandler wraps h; a Handler already is returned as it is.
func NewHandler(h slog.Handler) slog.Handler {
	if _, ok := h.(Handler); ok {
		return h
	}
	return Handler{h}
}

// Handle is slog.Handler's.
func (h Handler) Handle(ctx context.Context, r slog.Record) error {
	if ctx != nil {
		if id := RequestID(ctx); id != "" {
			r = r.Clone()
			r.AddAttrs(slog.String("request_id", id))
		}
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs is slog.Handler's.
func (h Handler) WithAttrs(as []slog.Attr) slog.Handler { return Handler{h.Handler.WithAttrs(as)} }

// WithGroup is slog.Handler's.
func (h Handler) WithGroup(name string) slog.Handler { return Handler{h.Handler.WithGroup(name)} }
