package orders

import (
	"net/http"
	"strings"

	"vendorgate/backend/store"
	"vendorgate/shared/apierr"
)

// NotHeld is the admin API's answer (409) to a release of an order, or of
// a service, that is not held for review: released already, or never held.
// A code of its own, not request_failed, which reads as if the release had
// broken.
const NotHeld apierr.Code = "not_held"

// notHeld says what the order's services are instead of held.
func notHeld(o *store.Order, service string) *apierr.Error {
	var states []string
	for _, sv := range o.Services {
		if service == "" || sv.Name == service {
			states = append(states, sv.Name+" "+sv.Status)
		}
	}
	what := "order " + o.ID + " is"
	if service != "" {
		what = "service " + service + " of order " + o.ID + " is"
	}
	e := apierr.New(NotHeld, "%s not held for review (%s): nothing to release; it was released already or never held",
		what, strings.Join(states, ", "))
	e.HTTPStatus = http.StatusConflict
	return e
}
