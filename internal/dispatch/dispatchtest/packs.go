package dispatchtest

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/ledger"
)

// storeRows is every row the store keeps for the endpoint, read from the
// store itself (not through the dispatcher, which merges in the packs).
func (f *fixture) storeRows(endpointID string) []dispatch.Delivery {
	f.t.Helper()
	rows, _, err := f.env.Store.ListDeliveries(context.Background(), dispatch.DeliveryQuery{EndpointID: endpointID}, 10000, "")
	if err != nil {
		f.t.Fatal(err)
	}
	return rows
}

// storePacks is every pack the store keeps for the endpoint.
func (f *fixture) storePacks(endpointID string) []dispatch.Pack {
	f.t.Helper()
	packs, err := f.env.Store.Packs(context.Background(), endpointID, "", 100000)
	if err != nil {
		f.t.Fatal(err)
	}
	return packs
}

// TestPackedSuccessesListed: events answered 2xx at their first attempt,
// sent directly (several users) or through a queue (a hot user), get no
// row: the store keeps them in packs, and the only row is that of an
// event whose first attempt failed. The listings show every event as
// before: one user's newest version first, page by page, each SUCCEEDED
// at attempt 1 with its 2xx logged; every user's newest event first, by
// event id, each once, rows and packed events in one order, page by page.
func testPackedSuccessesListed(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	failed := false
	rcv := newReceiver(t, func(_ int, a arrival) int {
		if a.user == "pf" && a.version == 2 && !failed {
			failed = true
			return http.StatusInternalServerError
		}
		return http.StatusNoContent
	})
	rcv.inOrder = true
	ep := f.endpoint(rcv)
	d := f.dispatcher(dispatch.Options{})
	users := []string{"pa", "pb", "pf"}
	for i := range 4 {
		for _, u := range users {
			f.clk.Add(time.Millisecond)
			f.apply(ledger.EntryGrant, ledger.Request{UserID: u, RequestID: fmt.Sprint("g", i), Amount: "1"})
		}
	}
	for i := range 24 { // more than directMost in one batch: through its queue
		f.apply(ledger.EntryGrant, ledger.Request{UserID: "ph", RequestID: fmt.Sprint("h", i), Amount: "1"})
	}
	f.feed(f.entries(users...), d)
	if err := d.Apply(context.Background(), f.entries("ph")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every event delivered", func() bool { return rcv.ackedCount() == 12+24 })
	settled(t, d)
	rcv.check()

	rows := f.storeRows(ep.ID)
	if len(rows) != 1 || rows[0].UserID != "pf" || rows[0].Version != 2 {
		t.Errorf("the store's rows %+v: want only pf's v2 (its first attempt failed)", rows)
	}
	packed := 0
	for _, p := range f.storePacks(ep.ID) {
		packed += len(p.Events)
	}
	if packed != 12+24-1 {
		t.Errorf("%d events packed, want %d (every first-attempt 2xx)", packed, 12+24-1)
	}

	for _, u := range []string{"pa", "ph"} {
		n := int64(len(f.entries(u)))
		got := pages(t, d, dispatch.DeliveryQuery{EndpointID: ep.ID, UserID: u}, 3, int(n)/3+2)
		if vs := versionsOf(got); !slices.Equal(vs, reversed(versions(1, n))) {
			t.Errorf("%s: versions %v, want %d down to 1", u, vs, n)
		}
		for _, r := range got {
			if r.State != dispatch.DeliverySucceeded || r.Attempts != 1 || r.LastStatusCode != 204 || r.EventID == "" ||
				r.Type != ledger.EventPointsGranted || r.UserID != u || !slices.Equal(statuses(r.Log), []int{204}) {
				t.Errorf("%s v%d: %+v, want SUCCEEDED at attempt 1 with its 204 logged", u, r.Version, r)
			}
			checkLog(t, r.Log)
		}
	}
	if r := rowOf(t, d, ep.ID, "pf", 2); r.Attempts != 2 || !slices.Equal(statuses(r.Log), []int{500, 204}) {
		t.Errorf("pf v2: %+v, want 2 attempts, [500 204] logged", r)
	}
	if got := pages(t, d, dispatch.DeliveryQuery{EndpointID: ep.ID, UserID: "pb", States: []dispatch.DeliveryState{dispatch.DeliverySucceeded}}, 50, 1); len(got) != 4 {
		t.Errorf("pb's SUCCEEDED: %d, want 4", len(got))
	}
	noneIn(t, d, dispatch.DeliveryQuery{EndpointID: ep.ID, UserID: "pa", States: []dispatch.DeliveryState{dispatch.DeliveryFailed, dispatch.DeliveryPending}})

	var want []string
	for _, e := range f.entries(append(users, "ph")...) {
		want = append(want, e.ID)
	}
	slices.SortFunc(want, func(a, b string) int { return strings.Compare(b, a) })
	for _, size := range []int{1, 5, 50} {
		var ids []string
		for _, r := range pages(t, d, dispatch.DeliveryQuery{EndpointID: ep.ID}, size, len(want)+2) {
			ids = append(ids, r.EventID)
			if r.State != dispatch.DeliverySucceeded {
				t.Errorf("every user's: %+v, want SUCCEEDED", r)
			}
		}
		if !slices.Equal(ids, want) {
			t.Errorf("every user's, pages of %d: %v, want newest event first %v", size, ids, want)
		}
	}
	got := pages(t, d, dispatch.DeliveryQuery{EndpointID: ep.ID, States: []dispatch.DeliveryState{dispatch.DeliverySucceeded}}, 7, 10)
	if len(got) != len(want) {
		t.Errorf("every user's SUCCEEDED: %d, want %d", len(got), len(want))
	}
}

// noneIn checks that q lists nothing.
func noneIn(t *testing.T, d *dispatch.Dispatcher, q dispatch.DeliveryQuery) {
	t.Helper()
	rows, next, err := d.ListDeliveries(context.Background(), q)
	if err != nil || len(rows) != 0 || next != "" {
		t.Errorf("%+v: %+v, next %q, %v; want nothing", q, rows, next, err)
	}
}

func reversed(vs []int64) []int64 {
	out := slices.Clone(vs)
	slices.Reverse(out)
	return out
}

// TestFailureRowThenPackedSuccess: an event given up after three 503s
// (its row FAILED) and then redelivered with a 200 at the first attempt
// (packed) is listed once, in both listings, as its latest attempt has
// it (SUCCEEDED, attempt 1, 200), its log holding both rounds; it is no
// longer FAILED.
func testFailureRowThenPackedSuccess(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	healed, rcv, ep, d := f.secondOfThreeGivenUp(t)
	settled(t, d)
	healed.Store(true)
	if n, err := d.Redeliver(context.Background(), dispatch.Redelivery{EndpointID: ep.ID, UserID: "x", FromVersion: 2}); err != nil || n != 2 {
		t.Fatalf("Redeliver = %d, %v; want 2", n, err)
	}
	waitFor(t, "the gap filled", func() bool { return rcv.requests() == 3+2+2 })
	settled(t, d)
	if rows := f.storeRows(ep.ID); len(rows) != 1 || rows[0].Version != 2 || rows[0].State != dispatch.DeliveryFailed {
		t.Errorf("the store's rows %+v: want v2's FAILED row alone (the 2xx are packed)", rows)
	}
	for _, q := range []dispatch.DeliveryQuery{{EndpointID: ep.ID, UserID: "x"}, {EndpointID: ep.ID}} {
		got := pages(t, d, q, 2, 4)
		if vs := versionsOf(got); !slices.Equal(vs, []int64{3, 2, 1}) {
			t.Fatalf("%+v: versions %v, want [3 2 1]", q, vs)
		}
		v2 := got[1]
		if v2.State != dispatch.DeliverySucceeded || v2.Attempts != 1 || v2.LastStatusCode != 200 || v2.LastError != "" ||
			!slices.Equal(statuses(v2.Log), []int{503, 503, 503, 200}) {
			t.Errorf("%+v: v2 %+v, want SUCCEEDED at attempt 1 (200), [503 503 503 200] logged", q, v2)
		}
		checkLog(t, v2.Log)
		if got := statuses(got[0].Log); !slices.Equal(got, []int{200, 200}) {
			t.Errorf("%+v: v3's log %v, want [200 200]: delivered, then redelivered", q, got)
		}
	}
	noneIn(t, d, dispatch.DeliveryQuery{EndpointID: ep.ID, States: []dispatch.DeliveryState{dispatch.DeliveryFailed}})
	noneIn(t, d, dispatch.DeliveryQuery{EndpointID: ep.ID, UserID: "x", States: []dispatch.DeliveryState{dispatch.DeliveryFailed}})
}

// TestRedeliveryFindsPackedUsers: a redelivery to every user reaches the
// users the endpoint knows only from packs (their events all answered 2xx
// at once, sent directly: no queue, no row), from a time as well as from
// the start.
func testRedeliveryFindsPackedUsers(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	rcv := newReceiver(t, nil)
	ep := f.endpoint(rcv)
	d := f.dispatcher(dispatch.Options{})
	for i := range 2 {
		f.apply(ledger.EntryGrant, ledger.Request{UserID: "early", RequestID: fmt.Sprint("g", i), Amount: "1"})
	}
	f.clk.Add(10 * time.Millisecond)
	from := f.clk.Now()
	for i := range 3 {
		f.apply(ledger.EntryGrant, ledger.Request{UserID: "later", RequestID: fmt.Sprint("g", i), Amount: "1"})
	}
	f.feed(f.entries("early", "later"), d)
	if rows := f.storeRows(ep.ID); len(rows) != 0 {
		t.Fatalf("the store's rows %+v: want none (every event answered 2xx at once)", rows)
	}
	n, err := d.Redeliver(context.Background(), dispatch.Redelivery{EndpointID: ep.ID, StartTime: from})
	if err != nil || n != 3 {
		t.Fatalf("Redeliver to every user from a time = %d, %v; want 3 (later's)", n, err)
	}
	waitFor(t, "later's again", func() bool { return rcv.requests() == 8 })
	settled(t, d)
	n, err = d.Redeliver(context.Background(), dispatch.Redelivery{EndpointID: ep.ID})
	if err != nil || n != 5 {
		t.Fatalf("Redeliver to every user = %d, %v; want 5", n, err)
	}
	waitFor(t, "every event again", func() bool { return rcv.requests() == 13 })
	settled(t, d)
	rcv.check()
}

// TestPacksKeepTheirBounds: a batch of more than dispatch.PackMost events
// answered 2xx at once, written over more than dispatch.PackSpan, goes in
// packs of at most PackMost events each, each within one PackSpan of
// event-id time, every event in exactly one, and each is listed.
func testPacksKeepTheirBounds(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	rcv := newReceiver(t, nil)
	ep := f.endpoint(rcv)
	d := f.dispatcher(dispatch.Options{})
	n := dispatch.PackMost + 20
	var users []string
	for i := range n {
		if i%100 == 0 {
			f.clk.Add(dispatch.PackSpan * 3 / 4) // ids over several spans (where ids follow the clock)
		}
		u := fmt.Sprintf("b%04d", i)
		users = append(users, u)
		f.apply(ledger.EntryGrant, ledger.Request{UserID: u, RequestID: "g", Amount: "1"})
	}
	entries := f.entries(users...)
	if err := d.Apply(context.Background(), entries); err != nil { // one batch: all sent directly
		t.Fatal(err)
	}
	seen := map[string]int{}
	packs := f.storePacks(ep.ID)
	if len(packs) < 2 {
		t.Errorf("%d packs for %d events, want at least 2 (at most %d a pack)", len(packs), n, dispatch.PackMost)
	}
	for _, p := range packs {
		if len(p.Events) == 0 || len(p.Events) > dispatch.PackMost {
			t.Errorf("pack %s: %d events, want 1 to %d", p.Key, len(p.Events), dispatch.PackMost)
		}
		if span := ulidTime(t, p.High()).Sub(ulidTime(t, p.Low())); span >= dispatch.PackSpan {
			t.Errorf("pack %s spans %v of event-id time, want less than %v", p.Key, span, dispatch.PackSpan)
		}
		if !strings.HasPrefix(p.Key, p.High()+"#") {
			t.Errorf("pack key %s, want its highest event id %s first", p.Key, p.High())
		}
		for _, e := range p.Events {
			seen[e.EventID]++
		}
	}
	for _, e := range entries {
		if seen[e.ID] != 1 {
			t.Errorf("%s v%d is in %d packs, want 1", e.UserID, e.Version, seen[e.ID])
		}
	}
	if got := pages(t, d, dispatch.DeliveryQuery{EndpointID: ep.ID}, 200, 10); len(got) != n {
		t.Errorf("every user's listing: %d, want %d", len(got), n)
	}
	if r := rowOf(t, d, ep.ID, users[n-1], 1); r.State != dispatch.DeliverySucceeded || r.Attempts != 1 {
		t.Errorf("%s: %+v, want SUCCEEDED at attempt 1", users[n-1], r)
	}
}

// ulidTime is the time of a ULID event id.
func ulidTime(t *testing.T, id string) time.Time {
	t.Helper()
	u, err := ulid.ParseStrict(id)
	if err != nil {
		t.Fatalf("event id %q: %v", id, err)
	}
	return ulid.Time(u.Time())
}

// TestListingLooksAtABoundedHistory: one user's listing looks at a bounded
// number of the user's entries per call: behind 299 entries the endpoint
// does not receive, its one delivered event comes on a later page, the
// first page empty with a next token, not after a read of the whole
// history in one call.
func testListingLooksAtABoundedHistory(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	rcv := newReceiver(t, nil)
	ep := f.endpoint(rcv, "points.granted")
	d := f.dispatcher(dispatch.Options{})
	f.apply(ledger.EntryGrant, ledger.Request{UserID: "long", RequestID: "g", Amount: "1000"})
	for i := range 299 {
		f.apply(ledger.EntryPurchase, ledger.Request{UserID: "long", RequestID: fmt.Sprint("p", i), Amount: "1"})
	}
	f.feed(f.entries("long"), d)
	waitFor(t, "the grant delivered", func() bool { return rcv.ackedCount() == 1 })
	settled(t, d)
	q := dispatch.DeliveryQuery{EndpointID: ep.ID, UserID: "long", Page: ledger.Page{PageSize: 50}}
	first, next, err := d.ListDeliveries(context.Background(), q)
	if err != nil || len(first) != 0 || next == "" {
		t.Fatalf("first page %+v, next %q, %v: want none of the 250 newest entries, and a next token", first, next, err)
	}
	got := pages(t, d, dispatch.DeliveryQuery{EndpointID: ep.ID, UserID: "long"}, 50, 3)
	if len(got) != 1 || got[0].Version != 1 || got[0].State != dispatch.DeliverySucceeded {
		t.Errorf("long's deliveries %+v: want the grant (v1), SUCCEEDED", got)
	}
}
