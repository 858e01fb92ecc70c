// Package placement validates an order request: the body's fields, the
// Idempotency-Key, and mc_number normalisation. It knows nothing of
// vendors or storage.
package placement

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"
	"unicode/utf8"

	"vendorgate/backend/textcheck"
	"vendorgate/shared/apierr"
	"vendorgate/shared/wire"
)

// MaxIdempotencyKey is the longest Idempotency-Key accepted.
const MaxIdempotencyKey = 255

// isUSState reports whether s is the two-letter code of a US state or DC.
func isUSState(s string) bool {
	switch s {
	case "AL", "AK", "AZ", "AR", "CA", "CO", "CT", "DE", "DC", "FL", "GA", "HI", "ID", "IL", "IN", "IA",
		"KS", "KY", "LA", "ME", "MD", "MA", "MI", "MN", "MS", "MO", "MT", "NE", "NV", "NH", "NJ", "NM",
		"NY", "NC", "ND", "OH", "OK", "OR", "PA", "RI", "SC", "SD", "TN", "TX", "UT", "VT", "VA", "WA",
		"WV", "WI", "WY":
		return true
	}
	return false
}

// NormaliseMC turns an MC number into "MC" and its digits without leading
// zeros: "mc-012345", "MC 12345" and "12345" all become "MC12345". ok is
// false unless it reduces to 1 to 8 digits.
func NormaliseMC(raw string) (string, bool) {
	s := strings.ToUpper(strings.TrimSpace(raw))
	s = strings.TrimPrefix(s, "MC")
	var digits strings.Builder
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			digits.WriteRune(c)
		case c == ' ' || c == '-' || c == '#' || c == '.':
		default:
			return "", false
		}
	}
	d := strings.TrimLeft(digits.String(), "0")
	if d == "" || len(d) > 8 {
		return "", false
	}
	return "MC" + d, true
}

// Request is a validated order request, in normalised form; its JSON is
// the canonical request an idempotency record hashes.
type Request struct {
	MCNumber          string      `json:"mc_number"`
	ExternalReference *string     `json:"external_reference"`
	Driver            wire.Driver `json:"driver"`
	Services          []string    `json:"services"`
}

// ValidationError is a validation_error naming fields.
func ValidationError(fields map[string]string) *apierr.Error {
	e := apierr.New(apierr.ValidationError, "the request is not valid; see fields")
	e.Fields = fields
	return e
}

// Parse decodes and validates an order body and the Idempotency-Key. now
// is today, for the driver's age. Every problem is named in fields.
func Parse(idemKey string, body []byte, now time.Time) (*Request, *apierr.Error) {
	fields := map[string]string{}
	switch {
	case idemKey == "":
		fields[wire.HeaderIdempotency] = "required: send a unique key per order"
	case len(idemKey) > MaxIdempotencyKey:
		fields[wire.HeaderIdempotency] = fmt.Sprintf("at most %d characters", MaxIdempotencyKey)
	case textcheck.HasControl(idemKey):
		fields[wire.HeaderIdempotency] = textcheck.Message
	}
	if bad := textcheck.ControlChars(body); bad != nil { // before any field is read: no value carries one further
		maps.Copy(fields, bad)
		return nil, ValidationError(fields)
	}
	var req struct {
		MCNumber          *string          `json:"mc_number"`
		ExternalReference *string          `json:"external_reference"`
		Driver            *json.RawMessage `json:"driver"`
		Services          *[]string        `json:"services"`
	}
	if f, msg := decodeStrict(body, &req); f != "" {
		fields[f] = msg
		return nil, ValidationError(fields)
	}
	p := &Request{}
	if req.MCNumber == nil {
		fields["mc_number"] = "required"
	} else if mc, ok := NormaliseMC(*req.MCNumber); !ok {
		fields["mc_number"] = "must be an MC number of 1 to 8 digits, such as MC-123456"
	} else {
		p.MCNumber = mc
	}
	if req.ExternalReference != nil {
		if utf8.RuneCountInString(*req.ExternalReference) > 128 {
			fields["external_reference"] = "at most 128 characters"
		}
		p.ExternalReference = req.ExternalReference
	}
	if req.Driver == nil || string(*req.Driver) == "null" {
		fields["driver"] = "required"
	} else {
		var d wire.Driver
		if f, msg := decodeStrict(*req.Driver, &d); f != "" {
			if f != "body" {
				f = "driver." + f
			} else {
				f, msg = "driver", "must be an object"
			}
			fields[f] = msg
		} else {
			p.Driver = checkDriver(d, fields, now)
		}
	}
	if req.Services == nil || len(*req.Services) == 0 {
		fields["services"] = "required: at least one of " + strings.Join(wire.Services(), ", ")
	} else {
		seen := map[string]bool{}
		for _, name := range *req.Services {
			if !wire.IsService(name) {
				fields["services"] = fmt.Sprintf("unknown service %q (known: %s)", name, strings.Join(wire.Services(), ", "))
				break
			}
			if seen[name] {
				fields["services"] = fmt.Sprintf("service %q is listed twice", name)
				break
			}
			seen[name] = true
		}
		for _, name := range wire.Services() {
			if seen[name] {
				p.Services = append(p.Services, name)
			}
		}
	}
	if len(fields) > 0 {
		return nil, ValidationError(fields)
	}
	return p, nil
}

func checkDriver(d wire.Driver, fields map[string]string, today time.Time) wire.Driver {
	name := func(field, v string) string {
		v = strings.TrimSpace(v)
		switch {
		case v == "":
			fields["driver."+field] = "required"
		case utf8.RuneCountInString(v) > 100:
			fields["driver."+field] = "at most 100 characters"
		}
		return v
	}
	d.FirstName, d.LastName = name("first_name", d.FirstName), name("last_name", d.LastName)
	if dob, err := time.Parse("2006-01-02", d.DateOfBirth); err != nil {
		fields["driver.date_of_birth"] = "must be a date YYYY-MM-DD"
	} else {
		age := today.Year() - dob.Year()
		if today.Month() < dob.Month() || today.Month() == dob.Month() && today.Day() < dob.Day() {
			age--
		}
		switch {
		case !dob.Before(today):
			fields["driver.date_of_birth"] = "must be in the past"
		case age < 16 || age > 120:
			fields["driver.date_of_birth"] = "the driver must be 16 to 120 years old"
		}
	}
	d.LicenseNumber = strings.ToUpper(strings.TrimSpace(d.LicenseNumber))
	if !licenseNumber(d.LicenseNumber) {
		fields["driver.license_number"] = "required: 1 to 32 letters A-Z and digits"
	}
	d.LicenseState = strings.ToUpper(strings.TrimSpace(d.LicenseState))
	if !isUSState(d.LicenseState) {
		fields["driver.license_state"] = "must be a two-letter US state code, such as TX"
	}
	return d
}

func licenseNumber(s string) bool {
	if len(s) == 0 || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// decodeStrict decodes one JSON object, refusing unknown fields. On failure
// it names the field at fault ("body" when it is the JSON itself).
func decodeStrict(data []byte, v any) (field, msg string) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		return "body", "data after the JSON object"
	}
	if err == nil {
		return "", ""
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return strings.Trim(f, `"`), "unknown field"
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return te.Field, "must be a " + te.Type.String()
	}
	return "body", "must be a JSON object"
}
