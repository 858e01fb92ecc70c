// Package logtext is what a log line may hold of text a client sent: a
// header value with every API-key-shaped run removed and its length
// bounded (Header), and a slog.Handler that escapes, in every string it
// logs, the characters a terminal or a log viewer would act on (Handler).
//
// slog's JSON handler escapes the C0 controls (ESC, CR, NUL) but writes the
// C1 controls (U+0080-U+009F: U+009B is a terminal's CSI, as ESC [ is) and
// the bidirectional overrides and isolates (which reorder what a viewer
// shows) as they are.
package logtext

import (
	"context"
	"encoding/binary"
	"log/slog"
	"strconv"
	"unicode/utf8"
	"unsafe"

	"vendorgate/shared/apikey"
)

// MaxHeader bounds what is logged of one header value, in bytes of the
// value (after keys are removed): a 7,000-byte User-Agent sent on every
// request would otherwise be written whole each time. What is cut is
// replaced by a marker naming the value's length as sent.
const MaxHeader = 256

// Redacted replaces a key-shaped run in a logged or echoed value.
const Redacted = "[redacted]"

// Header is v as it may be logged: every run shaped like an API key (any
// prefix, "_", a secret of the key alphabet: apikey.FindKeyShape) replaced
// by Redacted, then at most MaxHeader bytes of it (whole characters),
// followed by "...[truncated: N bytes]" (N the value's length as sent)
// when it was longer. Keys are removed from the whole value before it is
// cut: a cut first could leave a prefix and most of a secret. A clean
// value within the bound costs one scan and its string conversion.
func Header(v []byte) string {
	start, end := apikey.FindKeyShape(v)
	if start < 0 && len(v) <= MaxHeader {
		return string(v)
	}
	sent := len(v)
	b := make([]byte, 0, len(v)) // Redacted is shorter than any run it replaces
	for start >= 0 {
		b = append(b, v[:start]...)
		b = append(b, Redacted...)
		v = v[end:]
		start, end = apikey.FindKeyShape(v)
	}
	b = append(b, v...)
	if len(b) <= MaxHeader {
		return string(b)
	}
	cut := MaxHeader
	for cut > MaxHeader-utf8.UTFMax && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return string(b[:cut]) + "...[truncated: " + strconv.Itoa(sent) + " bytes]"
}

// Escape is s with each character a terminal or a log viewer acts on
// written out as the six characters of its \uXXXX escape: DEL, the C1
// controls U+0080-U+009F, the bidirectional embeddings and overrides
// U+202A-U+202E, isolates U+2066-U+2069 and marks (U+200E, U+200F,
// U+061C). The line then shows the escape, never the character. s is
// returned as it is (no allocation) when it has none.
func Escape(s string) string {
	i := firstUnsafe(s)
	if i < 0 {
		return s
	}
	b := make([]byte, 0, len(s)+16)
	b = append(b, s[:i]...)
	for _, r := range s[i:] {
		if !unsafeRune(r) {
			b = utf8.AppendRune(b, r)
			continue
		}
		b = append(b, `\u`...)
		const hex = "0123456789abcdef"
		b = append(b, hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
	}
	return string(b)
}

// firstUnsafe is the index of the first character of s that Escape
// rewrites, -1 when none. Every logged string is scanned: ASCII below DEL
// is passed over eight bytes at a time (highWord), the last few bytes as
// the string's last eight, and only a word that holds a byte of 0x7F or
// more is looked at a character at a time. The words are read from the
// string's bytes in place, never written (a load per byte cost about 40
// instructions a word: 1.1k on an access log line).
func firstUnsafe(s string) int {
	b := unsafe.Slice(unsafe.StringData(s), len(s))
	i := 0
	for ; i+8 <= len(b); i += 8 {
		if highWord(b[i:]) {
			return firstUnsafeFrom(s, i)
		}
	}
	if i == len(b) || len(b) >= 8 && !highWord(b[len(b)-8:]) {
		return -1
	}
	return firstUnsafeFrom(s, i)
}

// highWord reports whether one of b's first eight bytes is 0x7F or more:
// such a byte sets its top bit in w or in w+0x01..01 (a carry out of a
// byte comes only from 0xFF, whose top bit is set already).
func highWord(b []byte) bool {
	w := binary.LittleEndian.Uint64(b)
	return (w|(w+0x0101010101010101))&0x8080808080808080 != 0
}

// firstUnsafeFrom is firstUnsafe a byte at a time from i.
func firstUnsafeFrom(s string, i int) int {
	for ; i < len(s); i++ {
		if s[i] < 0x7f {
			continue
		}
		if r, _ := utf8.DecodeRuneInString(s[i:]); unsafeRune(r) {
			return i
		}
	}
	return -1
}

func unsafeRune(r rune) bool {
	switch {
	case r < 0x7f:
		return false
	case r <= 0x9f: // DEL and the C1 controls
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return r == 0x200e || r == 0x200f || r == 0x061c
}

// Handler escapes (Escape) the message and every string value a record
// carries, in groups too, and the text of an error value, before the
// handler it wraps writes them. A record with nothing to escape is passed
// on as it is, without an allocation.
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
	dirty := firstUnsafe(r.Message) >= 0
	if !dirty {
		r.Attrs(func(a slog.Attr) bool {
			dirty = needsEscape(a.Value)
			return !dirty
		})
	}
	if !dirty {
		return h.Handler.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, Escape(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(escapeAttr(a))
		return true
	})
	return h.Handler.Handle(ctx, out)
}

// WithAttrs is slog.Handler's.
func (h Handler) WithAttrs(as []slog.Attr) slog.Handler {
	es := make([]slog.Attr, len(as))
	for i, a := range as {
		es[i] = escapeAttr(a)
	}
	return Handler{h.Handler.WithAttrs(es)}
}

// WithGroup is slog.Handler's.
func (h Handler) WithGroup(name string) slog.Handler {
	return Handler{h.Handler.WithGroup(Escape(name))}
}

func needsEscape(v slog.Value) bool {
	switch v.Kind() {
	case slog.KindString:
		return firstUnsafe(v.String()) >= 0
	case slog.KindGroup:
		for _, a := range v.Group() {
			if needsEscape(a.Value) {
				return true
			}
		}
	case slog.KindLogValuer:
		return needsEscape(v.Resolve())
	case slog.KindAny:
		if err, ok := v.Any().(error); ok && err != nil {
			return firstUnsafe(err.Error()) >= 0
		}
	}
	return false
}

func escapeAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, Escape(v.String()))
	case slog.KindGroup:
		as := v.Group()
		es := make([]slog.Attr, len(as))
		for i, g := range as {
			es[i] = escapeAttr(g)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(es...)}
	case slog.KindAny:
		if err, ok := v.Any().(error); ok && err != nil {
			if s := err.Error(); firstUnsafe(s) >= 0 {
				return slog.String(a.Key, Escape(s))
			}
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
