// Package apierr holds the specification's error codes, the one table that
// maps each code to its HTTP status, and the JSON error envelope that every
// error answer of the vendor API carries, whoever produces it.
package apierr

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Code is a machine-readable error code of the specification. Clients branch
// on it; messages may change.
type Code string

// The specification's codes. request_failed takes the HTTP status of the
// error it describes (503 for a refused backend, 504 for a timeout), so it is
// the one code whose status is not fixed by the table.
const (
	ValidationError      Code = "validation_error"
	InvalidAPIKey        Code = "invalid_api_key"
	APIKeyExpired        Code = "api_key_expired"
	AccountNotApproved   Code = "account_not_approved"
	AccountSuspended     Code = "account_suspended"
	ServiceNotEnabled    Code = "service_not_enabled"
	PermissionDenied     Code = "permission_denied"
	NotFound             Code = "not_found"
	MethodNotAllowed     Code = "method_not_allowed"
	IdempotencyConflict  Code = "idempotency_conflict"
	InProgress           Code = "in_progress"
	PayloadTooLarge      Code = "payload_too_large"
	UnsupportedMediaType Code = "unsupported_media_type"
	MVRStateUnavailable  Code = "mvr_state_unavailable"
	RateLimited          Code = "rate_limited"
	InternalError        Code = "internal_error"
	RateLimitUnavailable Code = "rate_limit_unavailable"
	PriceUnavailable     Code = "price_unavailable"
	RequestFailed        Code = "request_failed"
)

// statuses is the specification's code → HTTP status table.
var statuses = map[Code]int{
	ValidationError:      http.StatusBadRequest,
	InvalidAPIKey:        http.StatusUnauthorized,
	APIKeyExpired:        http.StatusUnauthorized,
	AccountNotApproved:   http.StatusForbidden,
	AccountSuspended:     http.StatusForbidden,
	ServiceNotEnabled:    http.StatusForbidden,
	PermissionDenied:     http.StatusForbidden,
	NotFound:             http.StatusNotFound,
	MethodNotAllowed:     http.StatusMethodNotAllowed,
	IdempotencyConflict:  http.StatusConflict,
	InProgress:           http.StatusConflict,
	PayloadTooLarge:      http.StatusRequestEntityTooLarge,
	UnsupportedMediaType: http.StatusUnsupportedMediaType,
	MVRStateUnavailable:  http.StatusUnprocessableEntity,
	RateLimited:          http.StatusTooManyRequests,
	InternalError:        http.StatusInternalServerError,
	RateLimitUnavailable: http.StatusServiceUnavailable,
	PriceUnavailable:     http.StatusServiceUnavailable,
	RequestFailed:        http.StatusBadGateway,
}

// Codes lists every code of the specification, in the specification's order.
func Codes() []Code {
	return []Code{ValidationError, InvalidAPIKey, APIKeyExpired, AccountNotApproved,
		AccountSuspended, ServiceNotEnabled, PermissionDenied, NotFound, MethodNotAllowed,
		IdempotencyConflict, InProgress, PayloadTooLarge, UnsupportedMediaType,
		MVRStateUnavailable, RateLimited, InternalError, RateLimitUnavailable,
		PriceUnavailable, RequestFailed}
}

// Status is the HTTP status of c. request_failed has none of its own and
// answers 502 here; callers that know better use Error.Status.
func (c Code) Status() int {
	if s, ok := statuses[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Known reports whether c is a code of the specification.
func (c Code) Known() bool {
	_, ok := statuses[c]
	return ok
}

// Error is an API error as a Go value: what the envelope says and the status
// it is sent with. It satisfies error so that it can travel up a call chain.
type Error struct {
	Code    Code
	Message string
	// Fields holds per-field messages for validation_error; nil otherwise.
	Fields map[string]string
	// OrderID is set only with idempotency_conflict.
	OrderID string
	// HTTPStatus overrides Code.Status when non-zero (request_failed).
	HTTPStatus int
}

// New returns an Error with code c and a message for people.
func New(c Code, format string, args ...any) *Error {
	return &Error{Code: c, Message: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Status is the HTTP status e is sent with.
func (e *Error) Status() int {
	if e.HTTPStatus != 0 {
		return e.HTTPStatus
	}
	return e.Code.Status()
}

// Body is the JSON envelope of e.
func (e *Error) Body() []byte {
	b, err := json.Marshal(Envelope{Error: Detail{Code: e.Code, Message: e.Message, Fields: e.Fields, OrderID: e.OrderID}})
	if err != nil { // cannot happen: every field marshals
		return []byte(`{"error":{"code":"internal_error","message":"internal error","fields":null}}`)
	}
	return b
}

// Envelope is the body of every error answer: an object with one member.
type Envelope struct {
	Error Detail `json:"error"`
}

// Detail is the envelope's error member. Fields is always present (null
// when empty); order_id appears only with idempotency_conflict.
type Detail struct {
	Code    Code              `json:"code"`
	Message string            `json:"message"`
	Fields  map[string]string `json:"fields"`
	OrderID string            `json:"order_id,omitempty"`
}

// Parse reads an envelope from body. ok is false when body is not an
// envelope with a known code, so that a proxy knows to wrap it.
func Parse(body []byte) (d Detail, ok bool) {
	var env struct {
		Error *Detail `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Error == nil {
		return Detail{}, false
	}
	if !env.Error.Code.Known() || env.Error.Message == "" {
		return Detail{}, false
	}
	return *env.Error, true
}
