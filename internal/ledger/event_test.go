package ledger

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// Every entry type in the table is an event, each of its own type: a new
// entry type without a case in EventTypeOf fails here (and at lint).
func TestEventTypeOfEveryEntryType(t *testing.T) {
	t.Parallel()
	seen := map[EventType]EntryType{}
	for _, et := range slices.Sorted(maps.Keys(EntryTypes)) {
		ev := EventTypeOf(et)
		if ev == "" {
			t.Errorf("EventTypeOf(%s) = \"\": the entry type has no event", et)
			continue
		}
		if !slices.Contains(EventTypes, ev) {
			t.Errorf("EventTypeOf(%s) = %q, not in EventTypes", et, ev)
		}
		if other, dup := seen[ev]; dup {
			t.Errorf("EventTypeOf(%s) = EventTypeOf(%s) = %q: one event type per entry type", et, other, ev)
		}
		seen[ev] = et
	}
	if got := EventTypeOf("BONUS"); got != "" {
		t.Errorf("EventTypeOf(BONUS) = %q, want \"\" for no entry type", got)
	}
	if _, ok := seen[EventPointsExpiring]; ok {
		t.Errorf("an entry maps to %s, the notice that has no entry", EventPointsExpiring)
	}
}

// The mapping docs/design.md ("Events") gives, pair by pair.
func TestEventTypeOfIsTheDesign(t *testing.T) {
	t.Parallel()
	want := map[EntryType]EventType{
		EntryGrant:      "points.granted",
		EntryPurchase:   "points.spent",
		EntryRefund:     "points.refunded",
		EntryAdjustment: "points.adjusted",
		EntryExpiration: "points.expired",
		EntryMaturation: "points.matured",
		EntryReversal:   "points.reversed",
		EntryHold:       "hold.authorized",
		EntryCapture:    "hold.captured",
		EntryRelease:    "hold.released",
	}
	for et, ev := range want {
		if got := EventTypeOf(et); got != ev {
			t.Errorf("EventTypeOf(%s) = %q, want %q", et, got, ev)
		}
	}
	if len(EventTypes) != 11 || len(slices.Compact(slices.Sorted(slices.Values(EventTypes)))) != 11 {
		t.Errorf("EventTypes = %v, want the design's 11 distinct types", EventTypes)
	}
	for _, ev := range EventTypes {
		// Standard Webhooks: full-stop delimited identifiers of [a-z_].
		for part := range strings.SplitSeq(string(ev), ".") {
			if part == "" || strings.Trim(part, "abcdefghijklmnopqrstuvwxyz_") != "" {
				t.Errorf("event type %q: want dot-separated lowercase identifiers", ev)
			}
		}
	}
}

func TestParseSubscription(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		names    []string
		reason   string      // refused with this reason, or "" if accepted
		includes []EventType // accepted: what it receives
		excludes []EventType // accepted: what it does not
	}{
		{name: "all", names: []string{"*"}, includes: EventTypes, excludes: []EventType{"points.nonsense", ""}},
		{name: "a list", names: []string{"points.spent", "points.refunded"},
			includes: []EventType{EventPointsSpent, EventPointsRefunded},
			excludes: []EventType{EventPointsGranted, EventHoldCaptured, EventPointsExpiring}},
		{name: "the notice alone", names: []string{"points.expiring"},
			includes: []EventType{EventPointsExpiring}, excludes: []EventType{EventPointsExpired}},
		{name: "a maturation", names: []string{"points.matured"}, includes: []EventType{EventPointsMatured}},
		{name: "nothing", names: nil, reason: ReasonInvalidEventType},
		{name: "empty list", names: []string{}, reason: ReasonInvalidEventType},
		{name: "unknown", names: []string{"points.granted", "points.stolen"}, reason: ReasonInvalidEventType},
		{name: "entry type instead of event type", names: []string{"GRANT"}, reason: ReasonInvalidEventType},
		{name: "wrong case", names: []string{"Points.Granted"}, reason: ReasonInvalidEventType},
		{name: "empty name", names: []string{""}, reason: ReasonInvalidEventType},
		{name: "prefix wildcard", names: []string{"points.*"}, reason: ReasonInvalidEventType},
		{name: "star with others", names: []string{"*", "points.spent"}, reason: ReasonInvalidEventType},
		{name: "twice", names: []string{"points.spent", "points.spent"}, reason: ReasonInvalidEventType},
		{name: "long garbage", names: []string{strings.Repeat("x", 10000)}, reason: ReasonInvalidEventType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := ParseSubscription(tt.names)
			if tt.reason != "" {
				e, ok := AsError(err)
				if !ok || e.Kind != KindInvalid || e.Reason != tt.reason {
					t.Fatalf("ParseSubscription(%.40q) = %v, want invalid %s", tt.names, err, tt.reason)
				}
				if len(e.Message) > 400 {
					t.Errorf("message is %d bytes: an offending value is quoted whole", len(e.Message))
				}
				if s.Includes(EventPointsGranted) {
					t.Error("a refused subscription includes points.granted")
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseSubscription(%q): %v", tt.names, err)
			}
			for _, ev := range tt.includes {
				if !s.Includes(ev) {
					t.Errorf("%q does not include %s", tt.names, ev)
				}
			}
			for _, ev := range tt.excludes {
				if s.Includes(ev) {
					t.Errorf("%q includes %q", tt.names, ev)
				}
			}
			// What is stored and listed reads back as the same subscription.
			again, err := ParseSubscription(s.Names())
			if err != nil || !slices.Equal(again.Names(), tt.names) {
				t.Errorf("Names() = %q, parsed again %q, %v; want %q", s.Names(), again.Names(), err, tt.names)
			}
		})
	}
	var zero Subscription
	for _, ev := range EventTypes {
		if zero.Includes(ev) {
			t.Errorf("the zero Subscription includes %s", ev)
		}
	}
}
