package report

import "fmt"

// Webhooks is what the load test's webhook receiver (loadtest/receive)
// saw of a run's deliveries. Order, duplicates and gaps are over the whole
// run; the rate and the lag over the measurement.
type Webhooks struct {
	Deliveries int64 `json:"deliveries"` // requests received, whatever their answer
	// Events: distinct events (webhook-ids) verified and answered 2xx,
	// notices included; Notices: of them, points.expiring.
	Events  int64 `json:"events"`
	Notices int64 `json:"notices"`
	// Duplicates: verified deliveries of a webhook-id already received
	// (retries, answered 2xx and not counted again).
	Duplicates int64 `json:"duplicates"`
	Refused    int64 `json:"refused"`   // did not verify: answered 401
	Malformed  int64 `json:"malformed"` // verified, but not an event: answered 400
	Users      int   `json:"users"`     // users with an event
	// Gaps: times a user's event came with versions skipped before it;
	// Missing: versions skipped that had not arrived when the result was
	// taken; OutOfOrder: events at or below a user's last version that
	// filled no gap.
	Gaps       int64 `json:"gaps"`
	Missing    int64 `json:"missing"`
	OutOfOrder int64 `json:"out_of_order"`
	// EventsPerS: events received during the measurement, a second.
	EventsPerS float64 `json:"events_per_s"`
	// Lag: receive time minus the body's timestamp (its entry's
	// create_time), for the events of the entries written during the
	// measurement, whenever they arrived.
	Lag    Percentiles      `json:"lag"`
	ByType map[string]int64 `json:"by_type"` // events by type
}

// Violations are what the delivery promises did not hold: every delivery
// verifies, and each user's events arrive in version order with no gap.
// Duplicates are not among them: delivery is at least once.
func (w Webhooks) Violations() []string {
	var v []string
	for _, c := range []struct {
		n    int64
		what string
	}{
		{w.Refused, "deliveries did not verify"},
		{w.Malformed, "verified deliveries were not events"},
		{w.Gaps, "times a user's versions skipped"},
		{w.Missing, "versions never arrived"},
		{w.OutOfOrder, "events arrived out of their user's version order"},
	} {
		if c.n > 0 {
			v = append(v, fmt.Sprintf("webhooks: %d %s", c.n, c.what))
		}
	}
	return v
}

// Summary is the webhooks' line of the summary.
func (w Webhooks) Summary() string {
	return fmt.Sprintf("webhooks: %d events (%d notices) for %d users, %.0f/s; lag p50 %.1f ms, p99 %.1f ms, max %.1f ms; "+
		"%d duplicates, %d gaps (%d versions missing), %d out of order, %d refused, %d malformed",
		w.Events, w.Notices, w.Users, w.EventsPerS, w.Lag.P50, w.Lag.P99, w.Lag.Max,
		w.Duplicates, w.Gaps, w.Missing, w.OutOfOrder, w.Refused, w.Malformed)
}
