package report

import (
	"slices"
	"testing"
)

func TestWebhooksViolations(t *testing.T) {
	t.Parallel()
	// Retries and notices are as promised.
	clean := Webhooks{Deliveries: 12, Events: 10, Notices: 1, Duplicates: 2, Users: 3}
	if v := clean.Violations(); len(v) != 0 {
		t.Errorf("a run with retries only: %q, want no violation", v)
	}
	bad := Webhooks{Refused: 1, Malformed: 2, Gaps: 3, Missing: 4, OutOfOrder: 5}
	want := []string{
		"webhooks: 1 deliveries did not verify",
		"webhooks: 2 verified deliveries were not events",
		"webhooks: 3 times a user's versions skipped",
		"webhooks: 4 versions never arrived",
		"webhooks: 5 events arrived out of their user's version order",
	}
	if got := bad.Violations(); !slices.Equal(got, want) {
		t.Errorf("Violations:\n got %q\nwant %q", got, want)
	}
}

func TestWebhooksSummary(t *testing.T) {
	t.Parallel()
	w := Webhooks{Events: 1000, Notices: 2, Users: 50, EventsPerS: 412.4, Lag: Percentiles{P50: 3.14, P99: 41.26, Max: 120},
		Duplicates: 4, Gaps: 1, Missing: 1}
	want := "webhooks: 1000 events (2 notices) for 50 users, 412/s; lag p50 3.1 ms, p99 41.3 ms, max 120.0 ms; " +
		"4 duplicates, 1 gaps (1 versions missing), 0 out of order, 0 refused, 0 malformed"
	if got := w.Summary(); got != want {
		t.Errorf("Summary:\n got %q\nwant %q", got, want)
	}
}
