package dispatchtest

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/webhook"
)

// rowOf returns the delivery row of user's version on ep, read through
// the dispatcher (ListDeliveries of the user).
func rowOf(t *testing.T, d *dispatch.Dispatcher, endpointID, user string, version int64) dispatch.Delivery {
	t.Helper()
	rows, _, err := d.ListDeliveries(context.Background(), dispatch.DeliveryQuery{EndpointID: endpointID, UserID: user})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Version == version && !strings.HasPrefix(string(r.Type), "points.expiring") {
			return r
		}
	}
	t.Fatalf("no row of %s v%d in %+v", user, version, rows)
	return dispatch.Delivery{}
}

// statuses is the log's HTTP statuses, oldest first.
func statuses(log []dispatch.Attempt) []int {
	out := make([]int, len(log))
	for i, a := range log {
		out[i] = a.Status
	}
	return out
}

// checkLog checks what every attempt of a log carries: a time in order,
// no negative duration, an error exactly when no 2xx came.
func checkLog(t *testing.T, log []dispatch.Attempt) {
	t.Helper()
	for i, a := range log {
		if a.Time.IsZero() || (i > 0 && a.Time.Before(log[i-1].Time)) {
			t.Errorf("attempt %d at %v: want a time, in order (log %+v)", i, a.Time, log)
		}
		if a.Duration < 0 {
			t.Errorf("attempt %d took %v", i, a.Duration)
		}
		if ok := a.Status >= 200 && a.Status <= 299; ok != (a.Error == "") {
			t.Errorf("attempt %d: status %d with error %q", i, a.Status, a.Error)
		}
	}
}

// TestFailureThenSuccessKeepsBothAttempts: an event answered 500 twice
// then 204 shows all three attempts, oldest first, the failures with
// their errors.
func testFailureThenSuccessKeepsBothAttempts(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	rcv := newReceiver(t, func(n int, _ arrival) int {
		if n <= 2 {
			return http.StatusInternalServerError
		}
		return http.StatusNoContent
	})
	ep := f.endpoint(rcv)
	d := f.dispatcher(dispatch.Options{Schedule: webhook.Schedule{Delays: []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond}}})
	f.apply(ledger.EntryGrant, ledger.Request{UserID: "a", RequestID: "g1", Amount: "1"})
	f.feed(f.entries("a"), d)
	waitFor(t, "the event delivered", func() bool { return rcv.ackedCount() == 1 })
	settled(t, d)
	r := rowOf(t, d, ep.ID, "a", 1)
	if r.State != dispatch.DeliverySucceeded || r.Attempts != 3 || r.LastStatusCode != 204 {
		t.Errorf("row %+v: want SUCCEEDED after 3 attempts, last 204", r)
	}
	if got := statuses(r.Log); !slices.Equal(got, []int{500, 500, 204}) {
		t.Fatalf("log statuses %v, want [500 500 204] (log %+v)", got, r.Log)
	}
	checkLog(t, r.Log)
	if !strings.Contains(r.Log[0].Error, "500") {
		t.Errorf("first attempt's error %q, want it to name the 500", r.Log[0].Error)
	}
}

// TestRedeliveryKeepsEarlierAttempts: an event given up after three 503s
// and then redelivered with a 200 keeps the three failures before the
// success; attempts counts the redelivery's round.
func testRedeliveryKeepsEarlierAttempts(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	healed, rcv, ep, d := f.secondOfThreeGivenUp(t)
	settled(t, d)
	if r := rowOf(t, d, ep.ID, "x", 2); r.State != dispatch.DeliveryFailed || !slices.Equal(statuses(r.Log), []int{503, 503, 503}) {
		t.Fatalf("row %+v: want FAILED with three 503s logged", r)
	}
	healed.Store(true)
	if n, err := d.Redeliver(context.Background(), dispatch.Redelivery{EndpointID: ep.ID, UserID: "x", FromVersion: 2}); err != nil || n != 2 {
		t.Fatalf("Redeliver = %d, %v; want 2", n, err)
	}
	waitFor(t, "the gap filled", func() bool { return rcv.requests() == 3+2+2 })
	settled(t, d)
	r := rowOf(t, d, ep.ID, "x", 2)
	if r.State != dispatch.DeliverySucceeded || r.Attempts != 1 || r.LastStatusCode != 200 {
		t.Errorf("row %+v: want SUCCEEDED at the redelivery's first attempt", r)
	}
	if got := statuses(r.Log); !slices.Equal(got, []int{503, 503, 503, 200}) {
		t.Errorf("v2's log %v, want [503 503 503 200]: the failures before the redelivery kept", got)
	}
	checkLog(t, r.Log)
	if got := statuses(rowOf(t, d, ep.ID, "x", 3).Log); !slices.Equal(got, []int{200, 200}) {
		t.Errorf("v3's log %v, want [200 200]: delivered, then redelivered", got)
	}
}

// TestAttemptLogIsBounded: an event that takes more attempts than the log
// keeps shows the last dispatch.MaxAttemptLog of them.
func testAttemptLogIsBounded(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	failures := dispatch.MaxAttemptLog + 5
	rcv := newReceiver(t, func(n int, _ arrival) int {
		if n <= failures {
			return 500 + n // 501, 502, ...: each attempt its own status
		}
		return http.StatusOK
	})
	ep := f.endpoint(rcv)
	d := f.dispatcher(dispatch.Options{Schedule: webhook.Schedule{Delays: slices.Repeat([]time.Duration{time.Millisecond}, failures+1)}})
	f.apply(ledger.EntryGrant, ledger.Request{UserID: "b", RequestID: "g1", Amount: "1"})
	f.feed(f.entries("b"), d)
	waitFor(t, "the event delivered", func() bool { return rcv.ackedCount() == 1 })
	settled(t, d)
	r := rowOf(t, d, ep.ID, "b", 1)
	want := lastFailuresThen200(failures)
	if got := statuses(r.Log); !slices.Equal(got, want) {
		t.Errorf("log %v, want the last %d attempts %v", got, dispatch.MaxAttemptLog, want)
	}
	if r.Attempts != failures+1 {
		t.Errorf("attempts %d, want %d", r.Attempts, failures+1)
	}
	checkLog(t, r.Log)
}

// TestWaitingBehindAFailingEventIsPending: while a user's first event
// fails (its next attempt an hour away), the events behind it are listed
// as PENDING with no attempts, newest version first, page by page; asked
// for SUCCEEDED rows, none of them.
func testWaitingBehindAFailingEventIsPending(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	rcv := newReceiver(t, func(int, arrival) int { return http.StatusInternalServerError })
	ep := f.endpoint(rcv)
	d := f.dispatcher(dispatch.Options{Schedule: webhook.Schedule{Delays: []time.Duration{time.Hour}}})
	for i := range 3 {
		f.apply(ledger.EntryGrant, ledger.Request{UserID: "w", RequestID: fmt.Sprint("g", i), Amount: "1"})
	}
	f.feed(f.entries("w"), d)
	waitFor(t, "the head's failure on the record", func() bool {
		rows, _, err := d.ListDeliveries(context.Background(), dispatch.DeliveryQuery{
			EndpointID: ep.ID, UserID: "w", States: []dispatch.DeliveryState{dispatch.DeliverySucceeded, dispatch.DeliveryFailed, dispatch.DeliveryPending}})
		return err == nil && len(rows) == 3 && rows[2].Attempts == 1
	})
	got := pages(t, d, dispatch.DeliveryQuery{EndpointID: ep.ID, UserID: "w", States: []dispatch.DeliveryState{dispatch.DeliveryPending}}, 1, 4)
	var vs []int64
	for _, r := range got {
		vs = append(vs, r.Version)
		if r.State != dispatch.DeliveryPending || r.Type != ledger.EventPointsGranted || r.EventID == "" {
			t.Errorf("row %+v: want a PENDING points.granted with its event id", r)
		}
	}
	if !slices.Equal(vs, []int64{3, 2, 1}) {
		t.Fatalf("PENDING versions %v, want [3 2 1]", vs)
	}
	if got[0].Attempts != 0 || len(got[0].Log) != 0 || got[1].Attempts != 0 || got[2].Attempts != 1 || len(got[2].Log) != 1 || got[2].Log[0].Status != 500 {
		t.Errorf("rows %+v: want 3 and 2 not attempted, 1 attempted once (500)", got)
	}
	noSucceeded(t, d, ep.ID, "w", "behind a failing event")
}

// noSucceeded checks that user's listing on endpointID asked for
// SUCCEEDED rows has none (why: while what holds).
func noSucceeded(t *testing.T, d *dispatch.Dispatcher, endpointID, user, why string) {
	t.Helper()
	rows, _, err := d.ListDeliveries(context.Background(), dispatch.DeliveryQuery{
		EndpointID: endpointID, UserID: user, States: []dispatch.DeliveryState{dispatch.DeliverySucceeded}})
	if err != nil || len(rows) != 0 {
		t.Errorf("SUCCEEDED rows %+v, %v: want none %s", rows, err, why)
	}
}

// pages lists q page by page (pageSize a page, at most maxPages pages).
func pages(t *testing.T, d *dispatch.Dispatcher, q dispatch.DeliveryQuery, pageSize, maxPages int) []dispatch.Delivery {
	t.Helper()
	var got []dispatch.Delivery
	q.Page = ledger.Page{PageSize: pageSize}
	for n := 0; ; n++ {
		if n >= maxPages {
			t.Fatalf("more than %d pages of %d: %+v", maxPages, pageSize, got)
		}
		rows, next, err := d.ListDeliveries(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rows...)
		if next == "" {
			return got
		}
		q.PageToken = next
	}
}

// TestDeliveriesListedNewestFirst: every user's deliveries come newest
// event first (by event id, the entries' time order), one user's newest
// version first.
func testDeliveriesListedNewestFirst(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	rcv := newReceiver(t, nil)
	ep := f.endpoint(rcv)
	d := f.dispatcher(dispatch.Options{})
	for i := range 3 {
		for _, u := range []string{"p", "q"} {
			f.clk.Add(time.Millisecond) // one ULID millisecond each: ids in time order
			f.apply(ledger.EntryGrant, ledger.Request{UserID: u, RequestID: fmt.Sprint("g", i), Amount: "1"})
		}
	}
	all := f.entries("p", "q")
	f.feed(all, d)
	waitFor(t, "every event delivered", func() bool { return rcv.ackedCount() == 6 })
	settled(t, d)
	slices.SortFunc(all, func(a, b ledger.Entry) int { return b.CreateTime.Compare(a.CreateTime) })
	var want []string
	for _, e := range all {
		want = append(want, e.ID)
	}
	var ids []string
	token := ""
	for {
		rows, next, err := d.ListDeliveries(context.Background(), dispatch.DeliveryQuery{EndpointID: ep.ID, Page: ledger.Page{PageSize: 4, PageToken: token}})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			ids = append(ids, r.EventID)
		}
		if next == "" {
			break
		}
		token = next
	}
	if !slices.Equal(ids, want) {
		t.Errorf("every user's: %v, want newest event first %v", ids, want)
	}
	if vs := versionsOf(pages(t, d, dispatch.DeliveryQuery{EndpointID: ep.ID, UserID: "q"}, 50, 1)); !slices.Equal(vs, []int64{3, 2, 1}) {
		t.Errorf("q's: versions %v, want [3 2 1]", vs)
	}
}

// lastFailuresThen200 is the statuses a bounded attempt log keeps of an
// event answered 500+n at its n-th attempt, failures times, then 200: the
// last dispatch.MaxAttemptLog of them.
func lastFailuresThen200(failures int) []int {
	var want []int
	for n := failures - dispatch.MaxAttemptLog + 2; n <= failures; n++ {
		want = append(want, 500+n)
	}
	return append(want, 200)
}

// versionsOf is the rows' versions, in their order.
func versionsOf(rows []dispatch.Delivery) []int64 {
	vs := make([]int64, len(rows))
	for i, r := range rows {
		vs[i] = r.Version
	}
	return vs
}

// TestNoticeAttemptLogIsBounded: a notice that takes more attempts than
// the log keeps shows the last dispatch.MaxAttemptLog of them, as an
// entry's event does.
func testNoticeAttemptLogIsBounded(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	failures := dispatch.MaxAttemptLog + 3
	rcv := newReceiver(t, func(n int, _ arrival) int {
		if n <= failures {
			return 500 + n
		}
		return http.StatusOK
	})
	ep := f.endpoint(rcv, "points.expiring")
	d := f.dispatcher(dispatch.Options{Schedule: webhook.Schedule{Delays: slices.Repeat([]time.Duration{time.Millisecond}, failures+1)}})
	ev := webhook.Event{
		ID: "01JNOTICE0000000000000000B", Type: ledger.EventPointsExpiring, UserID: "nb", Version: 1,
		Time: f.clk.Now(), Data: []byte(`{"event_id":"01JNOTICE0000000000000000B","user_id":"nb","version":"1","amount":"5"}`),
	}
	if err := d.Notify(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	var row dispatch.Delivery
	waitFor(t, "the notice's row SUCCEEDED", func() bool {
		rows, _, err := d.ListDeliveries(context.Background(), dispatch.DeliveryQuery{EndpointID: ep.ID, UserID: "nb"})
		if err != nil || len(rows) != 1 {
			return false
		}
		row = rows[0]
		return row.State == dispatch.DeliverySucceeded
	})
	want := lastFailuresThen200(failures)
	if got := statuses(row.Log); !slices.Equal(got, want) {
		t.Errorf("notice's log %v, want the last %d attempts %v", got, dispatch.MaxAttemptLog, want)
	}
	checkLog(t, row.Log)
}

// TestRedeliveredEventsListedAsWaiting: after a redelivery, the events it
// asked again and that are not yet attempted are listed as waiting
// (PENDING, no attempts, their earlier attempts logged), not as their
// rows were (SUCCEEDED); the head,
// failing in the new round, is listed as its row is, its log keeping the
// first round's 2xx.
func testRedeliveredEventsListedAsWaiting(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	var broken atomic.Bool
	rcv := newReceiver(t, func(int, arrival) int {
		if broken.Load() {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	ep := f.endpoint(rcv)
	d := f.dispatcher(dispatch.Options{Schedule: webhook.Schedule{Delays: []time.Duration{time.Hour}}})
	for i := range 3 {
		f.apply(ledger.EntryGrant, ledger.Request{UserID: "r", RequestID: fmt.Sprint("g", i), Amount: "1"})
	}
	f.feed(f.entries("r"), d)
	waitFor(t, "every event delivered", func() bool { return rcv.ackedCount() == 3 })
	settled(t, d)
	broken.Store(true)
	if n, err := d.Redeliver(context.Background(), dispatch.Redelivery{EndpointID: ep.ID, UserID: "r", FromVersion: 1}); err != nil || n != 3 {
		t.Fatalf("Redeliver = %d, %v; want 3", n, err)
	}
	waitFor(t, "the head's new failure on the record", func() bool {
		r := rowOf(t, d, ep.ID, "r", 1)
		return r.State == dispatch.DeliveryPending && r.Attempts == 1
	})
	rows := pages(t, d, dispatch.DeliveryQuery{EndpointID: ep.ID, UserID: "r"}, 50, 1)
	if vs := versionsOf(rows); !slices.Equal(vs, []int64{3, 2, 1}) {
		t.Fatalf("versions %v, want [3 2 1], each once", vs)
	}
	for _, r := range rows[:2] {
		if r.State != dispatch.DeliveryPending || r.Attempts != 0 || !slices.Equal(statuses(r.Log), []int{200}) {
			t.Errorf("v%d: %+v, want waiting again (PENDING, no attempts), its first round's 200 in its log", r.Version, r)
		}
	}
	if got := statuses(rows[2].Log); rows[2].State != dispatch.DeliveryPending || !slices.Equal(got, []int{200, 503}) {
		t.Errorf("v1: %+v (log %v), want PENDING with [200 503] logged", rows[2], got)
	}
	noSucceeded(t, d, ep.ID, "r", "while all three wait again")
}

// TestEveryUsersListingShowsWaitingEvents: every user's listing that asks
// for PENDING shows the events waiting behind a failing one, of every user
// with a queue (by user, each newest first), page by page, then the rows.
func testEveryUsersListingShowsWaitingEvents(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	rcv := newReceiver(t, func(_ int, a arrival) int {
		if a.user == "ok" {
			return http.StatusOK
		}
		return http.StatusInternalServerError
	})
	ep := f.endpoint(rcv)
	d := f.dispatcher(dispatch.Options{Schedule: webhook.Schedule{Delays: []time.Duration{time.Hour}}})
	for _, u := range []string{"a", "b", "ok"} {
		for i := range 3 {
			f.apply(ledger.EntryGrant, ledger.Request{UserID: u, RequestID: fmt.Sprint("g", i), Amount: "1"})
		}
	}
	f.feed(f.entries("a", "b", "ok"), d)
	waitFor(t, "ok's events delivered", func() bool { return rcv.ackedCount() == 3 })
	settled(t, d)
	var got []string
	for _, r := range pages(t, d, dispatch.DeliveryQuery{EndpointID: ep.ID, States: []dispatch.DeliveryState{dispatch.DeliveryPending}}, 2, 20) {
		got = append(got, fmt.Sprintf("%s%d/%d", r.UserID, r.Version, r.Attempts))
	}
	// a's and b's waiting events (3, 2), then the heads' rows (1, tried
	// once), newest event first: b's head was written after a's or
	// before, so both orders of the two heads are right.
	want := []string{"a3/0", "a2/0", "b3/0", "b2/0"}
	if len(got) != 6 || !slices.Equal(got[:4], want) {
		t.Fatalf("PENDING, every user: %v, want %v then a1/1 and b1/1", got, want)
	}
	heads := slices.Sorted(slices.Values(got[4:]))
	if !slices.Equal(heads, []string{"a1/1", "b1/1"}) {
		t.Errorf("the heads' rows %v, want a1/1 and b1/1", got[4:])
	}
}
