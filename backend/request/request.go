// Package request reads what the backend's handlers are sent: a JSON body,
// decoded strictly, and the context a request's store calls run under.
package request

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"vendorgate/backend/textcheck"
	"vendorgate/shared/apierr"
	"vendorgate/shared/logctx"
	"vendorgate/shared/tracing"
	"vendorgate/shared/wire"
)

// Context is the context for the store calls of one request. A
// fasthttp RequestCtx has no deadline and is cancelled at server shutdown,
// which would abort requests the shutdown is meant to drain.
func Context() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 10*time.Second)
}

// ContextOf is Context for a request the gateway forwarded: it carries the
// gateway's request id, so that every line logged under it names the
// request (logctx.Handler), and the request's span.
func ContextOf(ctx *fasthttp.RequestCtx) (context.Context, context.CancelFunc) {
	// The request's server span, when tracing is on: the store calls under
	// c are its children.
	c := logctx.WithRequestID(tracing.From(ctx), string(ctx.Request.Header.Peek(wire.HeaderRequestID)))
	return context.WithTimeout(c, 10*time.Second)
}

// Decode reads a JSON body strictly into v: unknown fields, trailing data
// and a control character in any string are validation errors.
func Decode(body []byte, v any) *apierr.Error {
	if bad := textcheck.ControlChars(body); bad != nil {
		e := apierr.New(apierr.ValidationError, "the request is not valid; see fields")
		e.Fields = bad
		return e
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		e := apierr.New(apierr.ValidationError, "the request body is not valid JSON for this call: %s", jsonProblem(err))
		e.Fields = map[string]string{"body": jsonProblem(err)}
		return e
	}
	if dec.More() {
		e := apierr.New(apierr.ValidationError, "the request body has data after the JSON value")
		e.Fields = map[string]string{"body": "data after the JSON value"}
		return e
	}
	return nil
}

func jsonProblem(err error) string {
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return "unknown field " + f
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return "field " + te.Field + " has the wrong type"
	}
	return "invalid JSON"
}
