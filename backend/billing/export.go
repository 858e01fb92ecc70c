package billing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"vendorgate/backend/store"
)

// ExporterStore is what the exporter needs of the backend's store: the
// outbox.
type ExporterStore interface {
	EnqueueBillable(ctx context.Context, since, now time.Time) error
	DueBillingEvents(ctx context.Context, now time.Time, limit int) ([]*store.BillingEvent, error)
	MarkBillingSent(ctx context.Context, ids []string, at time.Time) error
	RetryBillingEvents(ctx context.Context, ids []string, next time.Time) error
}

// ExporterOptions configure an Exporter; every field is required but
// Token.
type ExporterOptions struct {
	Store ExporterStore
	// URL is the ingest endpoint, an OpenMeter-compatible
	// .../api/v1/events, posted a batch (application/cloudevents-batch+json).
	URL string
	// Token, when set, is sent as "Authorization: Bearer <token>".
	Token string
	// Source and Type are the CloudEvents' source and type.
	Source, Type string
	// BatchSize bounds the events of one request.
	BatchSize int
	// Lookback is how far back, by order placement, each run but the
	// first (which looks at every order) looks for services newly
	// billable: longer than the order deadline, after which no service
	// changes.
	Lookback time.Duration
	// BackoffMin and BackoffMax bound the wait before a batch that failed
	// is sent again: BackoffMin doubled per attempt, at most BackoffMax,
	// between half of it and all of it.
	BackoffMin, BackoffMax time.Duration
	// Client sends the requests; its Timeout bounds each.
	Client *http.Client
	Now    func() time.Time
}

// Exporter sends every billable service (completed, or failed no_record)
// as a CloudEvent, from the outbox in the backend's database: a service is
// put there once, under an id that is the same however often it is sent,
// and stays there until an answer 2xx says the endpoint took it. A restart
// loses nothing, and no order waits on it: it runs on its own, reading the
// orders the way the month report does.
type Exporter struct {
	o     ExporterOptions
	swept bool // the first run (every order) is done
	// pausedUntil is the end of the backoff after a failed batch: the
	// endpoint is not called before it, whichever batch is due (an
	// endpoint that is down gets one request per backoff, not one per
	// run).
	pausedUntil time.Time
}

// NewExporter returns an Exporter.
func NewExporter(o ExporterOptions) (*Exporter, error) {
	switch {
	case o.Store == nil || o.Client == nil || o.Now == nil:
		return nil, errors.New("billing export: store, client and clock required")
	case o.URL == "" || o.Source == "" || o.Type == "":
		return nil, errors.New("billing export: url, source and type required")
	case o.BatchSize <= 0 || o.Lookback <= 0 || o.BackoffMin <= 0 || o.BackoffMax < o.BackoffMin:
		return nil, fmt.Errorf("billing export: batch size %d, lookback %s, backoff %s to %s: each must be positive, the backoff's max at least its min",
			o.BatchSize, o.Lookback, o.BackoffMin, o.BackoffMax)
	}
	return &Exporter{o: o}, nil
}

// CloudEvent is one billable service as the endpoint receives it: ids,
// never driver data.
type CloudEvent struct {
	SpecVersion     string    `json:"specversion"`
	ID              string    `json:"id"`
	Source          string    `json:"source"`
	Type            string    `json:"type"`
	Subject         string    `json:"subject"` // the vendor id
	Time            time.Time `json:"time"`
	DataContentType string    `json:"datacontenttype"`
	Data            EventData `json:"data"`
}

// EventData is a CloudEvent's data.
type EventData struct {
	OrderID     string `json:"order_id"`
	Service     string `json:"service"`
	Outcome     string `json:"outcome"` // completed, no_record
	Environment string `json:"environment"`
}

// Run is one pass, what the background loop runs every interval: put the
// services newly billable into the outbox, then send the due events batch
// by batch until none is due or a batch fails (it is retried after its
// backoff). It returns how many were sent.
func (x *Exporter) Run(ctx context.Context) (int, error) {
	now := x.o.Now()
	since := time.Unix(0, 0)
	if x.swept {
		since = now.Add(-x.o.Lookback)
	}
	if err := x.o.Store.EnqueueBillable(ctx, since, now); err != nil {
		return 0, err
	}
	x.swept = true
	if now.Before(x.pausedUntil) {
		return 0, nil
	}
	sent := 0
	for {
		due, err := x.o.Store.DueBillingEvents(ctx, now, x.o.BatchSize)
		if err != nil || len(due) == 0 {
			return sent, err
		}
		ids := make([]string, len(due))
		attempts := 0
		for i, e := range due {
			ids[i] = e.ID
			attempts = max(attempts, e.Attempts)
		}
		if err := x.send(ctx, due); err != nil {
			next := now.Add(x.backoff(attempts))
			x.pausedUntil = next
			if rerr := x.o.Store.RetryBillingEvents(ctx, ids, next); rerr != nil {
				err = errors.Join(err, rerr)
			}
			return sent, fmt.Errorf("billing export: %d events not sent (attempt %d), next at %s: %w", len(due), attempts+1,
				next.UTC().Format(time.RFC3339), err)
		}
		if err := x.o.Store.MarkBillingSent(ctx, ids, x.o.Now()); err != nil {
			return sent, err // sent again next run: the endpoint dedupes by id
		}
		sent += len(due)
		if len(due) < x.o.BatchSize {
			return sent, nil
		}
	}
}

// backoff is the wait after a batch's attempts-th failure.
func (x *Exporter) backoff(attempts int) time.Duration {
	d := x.o.BackoffMax
	if attempts < 30 {
		d = min(x.o.BackoffMin<<attempts, x.o.BackoffMax)
	}
	return d/2 + rand.N(d/2+1)
}

// Event is e as a CloudEvent of source and type.
func Event(e *store.BillingEvent, source, typ string) CloudEvent {
	return CloudEvent{SpecVersion: "1.0", ID: e.ID, Source: source, Type: typ, Subject: e.VendorID, Time: e.At.UTC(),
		DataContentType: "application/json",
		Data:            EventData{OrderID: e.OrderID, Service: e.Service, Outcome: e.Outcome, Environment: e.Environment}}
}

func (x *Exporter) send(ctx context.Context, due []*store.BillingEvent) error {
	batch := make([]CloudEvent, len(due))
	for i, e := range due {
		batch[i] = Event(e, x.o.Source, x.o.Type)
	}
	body, err := json.Marshal(batch)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, x.o.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/cloudevents-batch+json")
	if x.o.Token != "" {
		req.Header.Set("Authorization", "Bearer "+x.o.Token)
	}
	res, err := x.o.Client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(res.Body, 200))
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %d: %s", x.o.URL, res.StatusCode, bytes.TrimSpace(msg))
	}
	return nil
}
