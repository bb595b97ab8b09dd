package dispatch

import (
	"cmp"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/webhook"
)

// The queue's state machine without a store: each decision of machine.go
// over values. These run in milliseconds; the contract suite
// (dispatchtest) runs the loop over both stores.

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func sub(t *testing.T, names ...string) ledger.Subscription {
	t.Helper()
	s, err := ledger.ParseSubscription(names)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestGroupMarksEachUserAndEndpointOnce(t *testing.T) {
	t.Parallel()
	grant := func(user string, v int64, at time.Time) ledger.Entry {
		return ledger.Entry{UserID: user, Version: v, Type: ledger.EntryGrant, CreateTime: at}
	}
	spend := func(user string, v int64, at time.Time) ledger.Entry {
		return ledger.Entry{UserID: user, Version: v, Type: ledger.EntryPurchase, CreateTime: at}
	}
	eps := map[string]Endpoint{
		"all":      {ID: "all", Subscription: sub(t, "*"), CreateTime: t0},
		"grants":   {ID: "grants", Subscription: sub(t, "points.granted"), CreateTime: t0},
		"late":     {ID: "late", Subscription: sub(t, "*"), CreateTime: t0.Add(time.Minute)},
		"disabled": {ID: "disabled", Subscription: sub(t, "*"), CreateTime: t0, Disabled: true},
	}
	byUser := map[string][]ledger.Entry{
		"alice": {grant("alice", 3, t0), spend("alice", 4, t0.Add(time.Second)), grant("alice", 5, t0.Add(2*time.Minute))},
		"bob":   {spend("bob", 1, t0)},
	}
	got := group(byUser, eps)
	slices.SortFunc(got, func(a, b mark) int {
		if c := cmp.Compare(a.ref.UserID, b.ref.UserID); c != 0 {
			return c
		}
		return cmp.Compare(a.ref.EndpointID, b.ref.EndpointID)
	})
	want := []mark{
		{ref: QueueRef{EndpointID: "all", UserID: "alice"}, first: 3, last: 5, n: 3, admitFrom: t0},
		{ref: QueueRef{EndpointID: "grants", UserID: "alice"}, first: 3, last: 5, n: 2, admitFrom: t0},
		{ref: QueueRef{EndpointID: "late", UserID: "alice"}, first: 5, last: 5, n: 1, admitFrom: t0.Add(time.Minute)},
		{ref: QueueRef{EndpointID: "all", UserID: "bob"}, first: 1, last: 1, n: 1, admitFrom: t0},
	}
	if !slices.Equal(got, want) {
		t.Errorf("group =\n%+v\nwant\n%+v", got, want)
	}
}

// An entry of the endpoint's own microsecond is not older than it.
func TestAdmitsToTheMicrosecond(t *testing.T) {
	t.Parallel()
	made := t0.Add(1500 * time.Nanosecond) // 1.5 µs
	ep := Endpoint{Subscription: sub(t, "points.granted"), CreateTime: made}
	for _, tc := range []struct {
		name string
		e    ledger.Entry
		want bool
	}{
		{"the same microsecond", ledger.Entry{Type: ledger.EntryGrant, CreateTime: t0.Add(time.Microsecond)}, true},
		{"later", ledger.Entry{Type: ledger.EntryGrant, CreateTime: t0.Add(time.Second)}, true},
		{"the microsecond before", ledger.Entry{Type: ledger.EntryGrant, CreateTime: t0}, false},
		{"not subscribed", ledger.Entry{Type: ledger.EntryPurchase, CreateTime: t0.Add(time.Second)}, false},
	} {
		if got := admits(ep, made, tc.e); got != tc.want {
			t.Errorf("%s: admits = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestAttemptNumberCountsTheHeadOnly(t *testing.T) {
	t.Parallel()
	q := Queue{Done: 4, Attempts: 2}
	for _, tc := range []struct {
		name    string
		version int64
		want    int
	}{
		{"the head", 5, 3},
		{"past the head (a group sent on)", 6, 1},
	} {
		if got := attemptNumber(q, tc.version); got != tc.want {
			t.Errorf("%s: attemptNumber = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestDecideSendsPutsOffAndGivesUp(t *testing.T) {
	t.Parallel()
	s := webhook.Schedule{Delays: []time.Duration{time.Second, time.Minute}}
	half := func() float64 { return 0.5 }
	ok := webhook.Attempt{StatusCode: http.StatusNoContent}
	bad := webhook.Attempt{StatusCode: http.StatusBadGateway}
	gone := webhook.Attempt{StatusCode: http.StatusGone}
	down := webhook.Attempt{Err: errors.New("connection refused")}
	for _, tc := range []struct {
		name     string
		res      webhook.Attempt
		attempts int
		want     step
	}{
		{"a 2xx", ok, 1, step{outcome: OutcomeSucceeded, state: DeliverySucceeded}},
		{"a 2xx at the last attempt", ok, 3, step{outcome: OutcomeSucceeded, state: DeliverySucceeded}},
		{"a 502, first attempt", bad, 1, step{outcome: OutcomeFailed, state: DeliveryPending, next: t0.Add(time.Second)}},
		{"no answer, second attempt", down, 2, step{outcome: OutcomeFailed, state: DeliveryPending, next: t0.Add(time.Minute)}},
		{"a 502 at the last attempt", bad, 3, step{outcome: OutcomeGaveUp, state: DeliveryFailed}},
		{"a 410", gone, 1, step{outcome: OutcomeGone, state: DeliveryPending, next: t0.Add(time.Second)}},
		{"a 410 at the last attempt", gone, 3, step{outcome: OutcomeGaveUp, state: DeliveryFailed}},
	} {
		got := decide(tc.res, tc.attempts, s, t0, half)
		if got != tc.want {
			t.Errorf("%s: decide = %+v, want %+v", tc.name, got, tc.want)
		}
		if got.resolved() != (tc.want.state != DeliveryPending) {
			t.Errorf("%s: resolved = %v", tc.name, got.resolved())
		}
	}
}

func TestFlushNow(t *testing.T) {
	t.Parallel()
	ok := step{outcome: OutcomeSucceeded, state: DeliverySucceeded}
	gaveUp := step{outcome: OutcomeGaveUp, state: DeliveryFailed}
	for _, tc := range []struct {
		name string
		st   step
		n    int
		age  time.Duration
		want bool
	}{
		{"one 2xx, new", ok, 1, 0, false},
		{"a full group", ok, maxGroup, 0, true},
		{"an old group", ok, 2, flushAfter, true},
		{"just under both", ok, maxGroup - 1, flushAfter - time.Nanosecond, false},
		{"a given-up event", gaveUp, 1, 0, true},
	} {
		if got := flushNow(tc.st, tc.n, tc.age); got != tc.want {
			t.Errorf("%s: flushNow = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestSettleKeepsTheClaimOfAQueueWantingMore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		w      QueueWrite
		wanted int64
		want   Hold
	}{
		{"nothing more wanted", QueueWrite{Done: 7, After: Release}, 7, Release},
		{"more wanted", QueueWrite{Done: 7, After: Release}, 8, KeepClaim},
		{"a put-off stays", QueueWrite{Done: 7, After: PutOff}, 9, PutOff},
		{"a drop stays", QueueWrite{Done: 7, After: Drop}, 9, Drop},
	} {
		if got := settle(tc.w, tc.wanted).After; got != tc.want {
			t.Errorf("%s: settle = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestAfterConflict(t *testing.T) {
	t.Parallel()
	q := Queue{RVN: 4, ClaimOwner: "me", Wanted: 5}
	for _, tc := range []struct {
		name string
		now  Queue
		ok   bool
		want verdict
	}{
		{"only wanted rose", Queue{RVN: 4, ClaimOwner: "me", Wanted: 9}, true, writeAgain},
		{"a redelivery moved it", Queue{RVN: 5, ClaimOwner: "me"}, true, redelivered},
		{"another holds it", Queue{RVN: 5, ClaimOwner: "other"}, true, claimLost},
		{"put off by another", Queue{RVN: 5, ClaimOwner: Waiting}, true, claimLost},
		{"gone", Queue{}, false, claimLost},
	} {
		if got := afterConflict(q, tc.now, tc.ok, "me"); got != tc.want {
			t.Errorf("%s: afterConflict = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRedoKeepsTheResolvedRowsUpToWhereItStarts(t *testing.T) {
	t.Parallel()
	row := func(v int64, s DeliveryState) Row { return Row{Event: webhook.Event{Version: v}, State: s} }
	rows := func() []Row {
		return []Row{row(3, DeliverySucceeded), row(4, DeliveryFailed), row(5, DeliverySucceeded), row(6, DeliveryPending)}
	}
	for _, tc := range []struct {
		name     string
		now      Queue
		cursor   int64
		wantTo   int64
		wantKept []int64
	}{
		{"redo from 4: 3 and 4 stay", Queue{Done: 2, Redo: 4, HasRedo: true}, 6, 4, []int64{3, 4}},
		{"redo past the cursor: from the cursor", Queue{Done: 2, Redo: 9, HasRedo: true}, 5, 5, []int64{3, 4, 5}},
		{"redo before done: from done", Queue{Done: 3, Redo: 1, HasRedo: true}, 6, 3, []int64{3}},
		{"no redo: from done", Queue{Done: 2}, 6, 2, nil},
	} {
		to, kept := redo(tc.now, tc.cursor, rows())
		var got []int64
		for _, r := range kept {
			got = append(got, r.Event.Version)
		}
		if to != tc.wantTo || !slices.Equal(got, tc.wantKept) {
			t.Errorf("%s: redo = %d %v, want %d %v", tc.name, to, got, tc.wantTo, tc.wantKept)
		}
	}
}

func TestRedeliveryStart(t *testing.T) {
	t.Parallel()
	ep := Endpoint{CreateTime: t0}
	earlier, later := t0.Add(-time.Hour), t0.Add(time.Hour)
	q := Queue{AdmitFrom: t0.Add(-time.Minute)}
	for _, tc := range []struct {
		name        string
		r           Redelivery
		exists      bool
		admit, from time.Time
	}{
		{"neither, no queue: from the endpoint", Redelivery{}, false, t0, t0},
		{"neither, a queue: as it admits", Redelivery{}, true, q.AdmitFrom, q.AdmitFrom},
		{"from a version: everything admitted", Redelivery{FromVersion: 3}, true, time.Unix(0, 0).UTC(), time.Unix(0, 0).UTC()},
		{"from an earlier time: admitted from it", Redelivery{StartTime: earlier}, false, earlier, earlier},
		{"from a later time: admitted as before", Redelivery{StartTime: later}, false, t0, later},
	} {
		admit, from := redeliveryStart(tc.r, ep, q, tc.exists)
		if !admit.Equal(tc.admit) || !from.Equal(tc.from) {
			t.Errorf("%s: redeliveryStart = %v %v, want %v %v", tc.name, admit, from, tc.admit, tc.from)
		}
	}
}

func TestMoveBackNeverMovesDoneForward(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		q      Queue
		exists bool
		target int64
		want   MoveBack
	}{
		{"no queue: made wanting the last, all sent again", Queue{}, false, 3, MoveBack{Done: 3, Wanted: 9, ResolvedHigh: 9, AdmitFrom: t0, Now: t0}},
		{"back from 7 to 3", Queue{Done: 7}, true, 3, MoveBack{Done: 3, Redo: 3, ResolvedHigh: 7, AdmitFrom: t0, Now: t0}},
		{"a target past done: done stays", Queue{Done: 2}, true, 5, MoveBack{Done: 2, Redo: 5, ResolvedHigh: 2, AdmitFrom: t0, Now: t0}},
		{"an earlier redo not yet taken wins", Queue{Done: 7, Redo: 1, HasRedo: true}, true, 3, MoveBack{Done: 3, Redo: 1, ResolvedHigh: 7, AdmitFrom: t0, Now: t0}},
		{"resolved before, higher", Queue{Done: 2, ResolvedHigh: 8}, true, 1, MoveBack{Done: 1, Redo: 1, ResolvedHigh: 8, AdmitFrom: t0, Now: t0}},
	} {
		if got := moveBack(tc.q, tc.exists, tc.target, 9, t0, t0); got != tc.want {
			t.Errorf("%s: moveBack = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestAppliedIsTheQueueAsWritten(t *testing.T) {
	t.Parallel()
	q := Queue{Done: 3, Attempts: 2, RVN: 7, HasRedo: true, Redo: 1, ClaimOwner: "me", ClaimUntil: t0}
	until := t0.Add(time.Minute)
	for _, tc := range []struct {
		name string
		w    QueueWrite
		want Queue
	}{
		{"a group, keeping the claim", QueueWrite{Done: 5, After: KeepClaim, Claim: Claim{Owner: "me", Until: until}},
			Queue{Done: 5, RVN: 8, Redo: 1, ClaimOwner: "me", ClaimUntil: time.Unix(0, until.UnixNano())}},
		{"a failed head, put off", QueueWrite{Done: 3, After: PutOff, Claim: Claim{Owner: Waiting, Until: until}, Failed: &FailedAttempt{Attempts: 3}},
			Queue{Done: 3, Attempts: 3, RVN: 8, Redo: 1, ClaimOwner: Waiting, ClaimUntil: time.Unix(0, until.UnixNano())}},
		{"released", QueueWrite{Done: 6, After: Release},
			Queue{Done: 6, RVN: 8, Redo: 1}},
		{"nothing resolved: attempts stay", QueueWrite{Done: 3, After: Drop},
			Queue{Done: 3, Attempts: 2, RVN: 8, Redo: 1}},
	} {
		if got := q.Applied(tc.w); got != tc.want {
			t.Errorf("%s: Applied =\n%+v\nwant\n%+v", tc.name, got, tc.want)
		}
	}
}
