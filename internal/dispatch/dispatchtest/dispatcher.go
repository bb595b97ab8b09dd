package dispatchtest

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
	"github.com/pointledger/pointledger/internal/webhook"
)

// workload writes grants, purchases, refunds, holds (captured and voided)
// and expirations for users, and returns their entries.
func (f *fixture) workload(users []string) []ledger.Entry {
	f.t.Helper()
	ledgertest.Storm(f.t, f.store, users, 4, 6*len(users), 1)
	for i, u := range users {
		switch i % 3 {
		case 0:
			f.apply(ledger.EntryGrant, ledger.Request{UserID: u, RequestID: "hg", Amount: "50"})
			f.apply(ledger.EntryHold, ledger.Request{UserID: u, RequestID: "h1", Amount: "20", Expire: f.clk.Now().Add(3 * time.Hour)})
			f.apply(ledger.EntryCapture, ledger.Request{UserID: u, RequestID: "c1", HoldRequestID: "h1", Amount: "15"})
			f.apply(ledger.EntryHold, ledger.Request{UserID: u, RequestID: "h2", Amount: "10", Expire: f.clk.Now().Add(3 * time.Hour)})
			f.apply(ledger.EntryRelease, ledger.Request{UserID: u, RequestID: "v2", HoldRequestID: "h2"})
		case 1:
			f.apply(ledger.EntryGrant, ledger.Request{UserID: u, RequestID: "xg", Amount: "7", Expire: f.clk.Now().Add(time.Hour)})
		}
	}
	f.clk.Add(2 * time.Hour)
	for i, u := range users {
		if i%3 == 1 {
			if res, err := f.store.Expire(context.Background(), u); err != nil || res.Entry.Type != ledger.EntryExpiration {
				f.t.Fatalf("expire %s: %+v, %v", u, res.Entry, err)
			}
		}
	}
	return f.entries(users...)
}

// TestEveryEntryDeliveredInOrder: every entry of a run of grants,
// purchases, refunds, holds and expirations for 50 users reaches an
// endpoint of every type, signed, in version order per user without a
// gap; an endpoint of two types gets exactly those, in order; and the
// delivery rows list them all.
func testEveryEntryDeliveredInOrder(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	all := newReceiver(t, nil)
	all.inOrder = true
	some := newReceiver(t, nil)
	epAll := f.endpoint(all)
	epSome := f.endpoint(some, "points.spent", "hold.captured")
	var obs observed
	d := f.dispatcher(dispatch.Options{Observer: obs.observer()})
	users := ledgertest.Users("u", 50)
	entries := f.workload(users)
	f.feed(entries, d)

	byUser := map[string][]ledger.Entry{}
	wantSome := 0
	for _, e := range entries {
		byUser[e.UserID] = append(byUser[e.UserID], e)
		if e.Type == ledger.EntryPurchase || e.Type == ledger.EntryCapture {
			wantSome++
		}
	}
	waitFor(t, "every event at both endpoints", func() bool {
		return all.ackedCount() == len(entries) && some.ackedCount() == wantSome
	})
	all.check()
	some.check()
	settled(t, d)
	types := map[ledger.EntryType]bool{}
	for _, u := range users {
		es := byUser[u]
		if got := all.ackedVersions(u); !slices.Equal(got, versions(1, int64(len(es)))) {
			t.Errorf("%s: versions acked %v, want 1..%d in order", u, got, len(es))
		}
		var want []int64
		for _, e := range es {
			types[e.Type] = true
			if e.Type == ledger.EntryPurchase || e.Type == ledger.EntryCapture {
				want = append(want, e.Version)
			}
		}
		if got := some.ackedVersions(u); !slices.Equal(got, want) {
			t.Errorf("%s: the spent/captured endpoint got %v, want %v", u, got, want)
		}
	}
	for _, typ := range []ledger.EntryType{ledger.EntryGrant, ledger.EntryPurchase, ledger.EntryRefund, ledger.EntryHold,
		ledger.EntryCapture, ledger.EntryRelease, ledger.EntryExpiration} {
		if !types[typ] {
			t.Errorf("the workload wrote no %s entry", typ)
		}
	}

	// The rows: every event once, SUCCEEDED, across pages, newest first.
	seen := map[string]bool{}
	token := ""
	var last string
	for {
		page, next, err := d.ListDeliveries(context.Background(), dispatch.DeliveryQuery{EndpointID: epAll.ID, Page: ledger.Page{PageSize: 37, PageToken: token}})
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range page {
			if seen[row.EventID] || row.State != dispatch.DeliverySucceeded || row.Attempts != 1 || row.EndpointID != epAll.ID {
				t.Errorf("row %+v: want each event once, SUCCEEDED at its first attempt", row)
			}
			if last != "" && row.EventID > last {
				t.Errorf("row %s after %s: want newest event first", row.EventID, last)
			}
			seen[row.EventID], last = true, row.EventID
		}
		if next == "" {
			break
		}
		token = next
	}
	if len(seen) != len(entries) {
		t.Errorf("ListDeliveries listed %d rows, want %d", len(seen), len(entries))
	}
	rows, next, err := d.ListDeliveries(context.Background(), dispatch.DeliveryQuery{EndpointID: epAll.ID, UserID: "u0", States: []dispatch.DeliveryState{dispatch.DeliverySucceeded}})
	if err != nil || next != "" || len(rows) != len(byUser["u0"]) || rows[0].Version != int64(len(byUser["u0"])) {
		t.Errorf("u0's rows: %d, next %q, %v; want %d, newest version first", len(rows), next, err, len(byUser["u0"]))
	}
	sent := len(entries) + wantSome
	if st := d.Status(); st.Delivered != int64(sent) || st.EntriesApplied != int64(len(entries)) || st.Endpoints != 2 {
		t.Errorf("status %+v: want %d delivered, %d applied, 2 endpoints", st, sent, len(entries))
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.dispatched != sent || obs.attempts[dispatch.OutcomeSucceeded] != sent || len(obs.attempts) != 1 || obs.lags != sent ||
		obs.depth[epAll.ID] != 0 || obs.depth[epSome.ID] != 0 {
		t.Errorf("observed %d dispatched, attempts %v, %d lags, depths %v; want %d each, all succeeded, depths 0",
			obs.dispatched, obs.attempts, obs.lags, obs.depth, sent)
	}
}

// TestTwoDispatchersRace: two dispatchers fed the same batches deliver
// the same queues; a receiver failing one request in three. Order per user
// holds, nothing is lost, duplicates only as the same webhook-id.
func testTwoDispatchersRace(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	rcv := newReceiver(t, func(n int, _ arrival) int {
		if n%3 == 0 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	rcv.inOrder = true
	f.endpoint(rcv)
	long := dispatch.Options{Schedule: webhook.Schedule{Delays: slices.Repeat([]time.Duration{2 * time.Millisecond}, 50)}}
	one, two := f.dispatcher(long), f.dispatcher(long)
	users := ledgertest.Users("r", 10)
	for round := range 3 {
		for _, u := range users {
			for i := range 3 {
				f.apply(ledger.EntryGrant, ledger.Request{UserID: u, RequestID: fmt.Sprint("g", round, "-", i), Amount: "1"})
			}
		}
		f.feed(f.entries(users...), one, two)
	}
	waitFor(t, "every event delivered", func() bool { return rcv.ackedCount() == 90 })
	rcv.check()
	for _, u := range users {
		if got := rcv.ackedVersions(u); !slices.Equal(got, versions(1, 9)) {
			t.Errorf("%s: %v, want 1..9 in order", u, got)
		}
	}
	if a, b := one.Status().Attempts, two.Status().Attempts; a == 0 || b == 0 {
		t.Logf("attempts by dispatcher: %d and %d (one did all the work)", a, b)
	}
}

// TestEndpointGetsEntriesFromItsCreation: an endpoint created after some
// of a user's entries gets only the later ones; a redelivery from version
// 1 sends the older ones too.
func testEndpointGetsEntriesFromItsCreation(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	for i := range 3 {
		f.apply(ledger.EntryGrant, ledger.Request{UserID: "late", RequestID: fmt.Sprint("old", i), Amount: "1"})
	}
	f.clk.Add(time.Second)
	rcv := newReceiver(t, nil)
	ep := f.endpoint(rcv)
	f.clk.Add(time.Second)
	for i := range 2 {
		f.apply(ledger.EntryGrant, ledger.Request{UserID: "late", RequestID: fmt.Sprint("new", i), Amount: "1"})
	}
	d := f.dispatcher(dispatch.Options{})
	f.feed(f.entries("late"), d)
	waitFor(t, "the new entries", func() bool { return rcv.ackedCount() == 2 })
	if got := rcv.ackedVersions("late"); !slices.Equal(got, []int64{4, 5}) {
		t.Errorf("versions %v, want 4 and 5 only", got)
	}
	n, err := d.Redeliver(context.Background(), dispatch.Redelivery{EndpointID: ep.ID})
	if err != nil || n != 2 {
		t.Errorf("Redeliver from the endpoint's first entry = %d, %v; want 2", n, err)
	}
	waitFor(t, "4 and 5 again", func() bool { return rcv.requests() == 4 })
	n, err = d.Redeliver(context.Background(), dispatch.Redelivery{EndpointID: ep.ID, UserID: "late", FromVersion: 1})
	if err != nil || n != 5 {
		t.Fatalf("Redeliver from version 1 = %d, %v; want 5", n, err)
	}
	waitFor(t, "the old entries", func() bool { return rcv.ackedCount() == 5 })
	rcv.check()
	if got := rcv.ackedVersions("late"); !slices.Equal(got, []int64{4, 5, 1, 2, 3}) {
		t.Errorf("first acks %v, want 4, 5, then 1, 2, 3", got)
	}
}

// TestDisabledEndpointGetsNothing: once a disable is older than
// EndpointRefresh (the API waits that long before it answers), no attempt
// starts for the endpoint.
func testDisabledEndpointGetsNothing(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	off := newReceiver(t, nil)
	witness := newReceiver(t, nil)
	ep := f.endpoint(off)
	f.endpoint(witness)
	const refresh = 50 * time.Millisecond
	d := f.dispatcher(dispatch.Options{EndpointRefresh: refresh})
	f.apply(ledger.EntryGrant, ledger.Request{UserID: "d", RequestID: "g1", Amount: "1"})
	f.feed(f.entries("d"), d)
	waitFor(t, "the first event at both", func() bool { return off.ackedCount() == 1 && witness.ackedCount() == 1 })
	if _, err := f.endpoints.Update(context.Background(), ep.ID, func(e *dispatch.Endpoint) error {
		e.Disabled, e.DisabledReason = true, "by the test"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(refresh) // as the API does before it answers
	for i := 2; i <= 4; i++ {
		f.apply(ledger.EntryGrant, ledger.Request{UserID: "d", RequestID: fmt.Sprint("g", i), Amount: "1"})
	}
	f.feed(f.entries("d"), d)
	waitFor(t, "the witness to get every event", func() bool { return witness.ackedCount() == 4 })
	if n := off.requests(); n != 1 {
		t.Errorf("the disabled endpoint got %d requests, want 1 (before the disable)", n)
	}
}

// TestNotify: a notice goes to the endpoints subscribed to its type, once
// however often it is notified, outside the user's order (the user's
// first event waits an hour for its retry meanwhile), and is listed with
// the deliveries.
func testNotify(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	sub := newReceiver(t, func(_ int, a arrival) int {
		if a.typ != string(ledger.EventPointsExpiring) {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	other := newReceiver(t, nil)
	ep := f.endpoint(sub, "points.expiring", "points.granted")
	f.endpoint(other, "points.spent")
	d := f.dispatcher(dispatch.Options{Schedule: webhook.Schedule{Delays: []time.Duration{time.Hour}}})
	f.apply(ledger.EntryGrant, ledger.Request{UserID: "n", RequestID: "g1", Amount: "5"})
	f.feed(f.entries("n"), d)
	waitFor(t, "the grant's first attempt", func() bool { return sub.requests() == 1 })
	ev := webhook.Event{
		ID: "01JNOTICE0000000000000000A", Type: ledger.EventPointsExpiring, UserID: "n", Version: 3,
		Time: f.clk.Now(), Data: []byte(`{"event_id":"01JNOTICE0000000000000000A","user_id":"n","version":"3","amount":"5"}`),
	}
	for range 2 {
		if err := d.Notify(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the notice", func() bool { return sub.ackedCount() == 1 })
	sub.check()
	waitFor(t, "the notice's row SUCCEEDED", func() bool {
		rows, _, err := d.ListDeliveries(context.Background(), dispatch.DeliveryQuery{EndpointID: ep.ID, States: []dispatch.DeliveryState{dispatch.DeliverySucceeded}})
		return err == nil && len(rows) == 1 && rows[0].EventID == ev.ID && rows[0].Type == ledger.EventPointsExpiring && rows[0].Attempts == 1
	})
	rows, _, err := d.ListDeliveries(context.Background(), dispatch.DeliveryQuery{EndpointID: ep.ID, UserID: "n"})
	if err != nil || len(rows) != 2 || rows[0].Version != 1 || rows[0].State != dispatch.DeliveryPending || rows[1].EventID != ev.ID {
		t.Errorf("n's rows %+v, %v: want the grant PENDING, then the notice", rows, err)
	} else if !slices.Equal(statuses(rows[0].Log), []int{500}) || !slices.Equal(statuses(rows[1].Log), []int{200}) {
		t.Errorf("n's logs %+v and %+v: want the grant's 500, the notice's 200", rows[0].Log, rows[1].Log)
	} else {
		checkLog(t, rows[1].Log)
	}
	if n := sub.requests(); n != 2 {
		t.Errorf("%d requests, want 2: the grant's first attempt and the notice once", n)
	}
	if n := other.requests(); n != 0 {
		t.Errorf("an endpoint not subscribed got %d requests", n)
	}
}

// TestBadRequestsAreRefused: malformed list and redelivery requests get
// a reason and change nothing.
func testBadRequestsAreRefused(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	rcv := newReceiver(t, nil)
	ep := f.endpoint(rcv)
	d := f.dispatcher(dispatch.Options{})
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		call   func() error
		reason string
	}{
		{"unknown state", func() error {
			_, _, err := d.ListDeliveries(ctx, dispatch.DeliveryQuery{EndpointID: ep.ID, States: []dispatch.DeliveryState{"LOST"}})
			return err
		}, ledger.ReasonInvalidFilter},
		{"forged token", func() error {
			_, _, err := d.ListDeliveries(ctx, dispatch.DeliveryQuery{EndpointID: ep.ID, Page: ledger.Page{PageToken: "k1.AAAA"}})
			return err
		}, ledger.ReasonInvalidPageToken},
		{"unknown endpoint", func() error {
			_, _, err := d.ListDeliveries(ctx, dispatch.DeliveryQuery{EndpointID: "01JNOPE0000000000000000000"})
			return err
		}, ledger.ReasonEndpointNotFound},
		{"version and time", func() error {
			_, err := d.Redeliver(ctx, dispatch.Redelivery{EndpointID: ep.ID, FromVersion: 2, StartTime: time.Now()})
			return err
		}, ledger.ReasonInvalidFilter},
		{"bad user", func() error {
			_, err := d.Redeliver(ctx, dispatch.Redelivery{EndpointID: ep.ID, UserID: "no spaces"})
			return err
		}, ledger.ReasonInvalidUserID},
	} {
		if err := c.call(); ledger.ReasonOf(err) != c.reason {
			t.Errorf("%s: %v, want %s", c.name, err, c.reason)
		}
	}
}

// TestExpiredClaimIsTakenOver: a queue claimed by a dispatcher that died
// (its claim written as a crash leaves it, straight into the store) is
// delivered by another once the claim expires, in order.
func testExpiredClaimIsTakenOver(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	rcv := newReceiver(t, nil)
	rcv.inOrder = true
	ep := f.endpoint(rcv)
	idle, err := dispatch.New(f.env.Store, f.store, dispatch.Options{Sender: sender(time.Second), EncodeEntry: testEntryJSON, QueueAll: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		f.apply(ledger.EntryGrant, ledger.Request{UserID: "c", RequestID: fmt.Sprint("g", i), Amount: "1"})
	}
	f.feed(f.entries("c"), idle) // marked, never run
	err = f.env.Crash(dispatch.QueueRef{EndpointID: ep.ID, UserID: "c"}, "ghost", time.Now().Add(500*time.Millisecond))
	if err != nil {
		t.Fatalf("the ghost's claim: %v", err)
	}
	f.dispatcher(dispatch.Options{})
	waitFor(t, "every event delivered", func() bool { return rcv.ackedCount() == 3 })
	rcv.check()
	if got := rcv.ackedVersions("c"); !slices.Equal(got, versions(1, 3)) {
		t.Errorf("versions %v, want 1..3", got)
	}
}

// TestEndpointMadeJustBeforeAnEntry: an endpoint created after the
// dispatcher last read the endpoints, and before an entry, gets the entry:
// Apply reads the endpoints again when its entries are newer than its
// read, however long EndpointRefresh is. (The dispatcher runs on the
// test's clock, which moves only when the test moves it.)
func testEndpointMadeJustBeforeAnEntry(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	first, second := newReceiver(t, nil), newReceiver(t, nil)
	f.endpoint(first)
	d := f.dispatcher(dispatch.Options{Now: f.clk.Now, EndpointRefresh: time.Hour})
	f.apply(ledger.EntryGrant, ledger.Request{UserID: "j", RequestID: "g1", Amount: "1"})
	f.feed(f.entries("j"), d) // the endpoints read now: only the first
	f.clk.Add(time.Millisecond)
	f.endpoint(second)
	f.clk.Add(time.Millisecond)
	f.apply(ledger.EntryGrant, ledger.Request{UserID: "j", RequestID: "g2", Amount: "1"})
	f.feed(f.entries("j")[1:], d)
	waitFor(t, "version 2 at both", func() bool { return first.ackedCount() == 2 && second.ackedCount() == 1 })
	if got := second.ackedVersions("j"); !slices.Equal(got, []int64{2}) {
		t.Errorf("the new endpoint got %v, want version 2", got)
	}
	first.check()
	second.check()
}

// TestStoppedDispatcherReleasesItsQueues: a dispatcher stopped during an
// attempt records the attempt's outcome and releases the queue, so that
// another goes on at once, long before the stopped one's claim (ten
// minutes) would expire.
func testStoppedDispatcherReleasesItsQueues(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	arrived, answer := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	rcv := newReceiver(t, func(int, arrival) int {
		if once.CompareAndSwap(false, true) {
			close(arrived)
			<-answer
		}
		return http.StatusOK
	})
	rcv.inOrder = true
	f.endpoint(rcv)
	first, err := dispatch.New(f.env.Store, f.store, dispatch.Options{
		Sender: sender(time.Minute), EncodeEntry: testEntryJSON, ClaimTTL: 10 * time.Minute, PollInterval: 20 * time.Millisecond,
		QueueAll: true, // a stop during a queue's delivery
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- first.Run(ctx) }()
	for i := range 3 {
		f.apply(ledger.EntryGrant, ledger.Request{UserID: "s", RequestID: fmt.Sprint("g", i), Amount: "1"})
	}
	f.feed(f.entries("s"), first)
	<-arrived
	cancel()
	close(answer)
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := rcv.ackedVersions("s"); !slices.Equal(got, []int64{1}) {
		t.Fatalf("before the stop: %v, want version 1 only", got)
	}
	f.dispatcher(dispatch.Options{})
	waitFor(t, "versions 2 and 3 from the second dispatcher", func() bool { return rcv.ackedCount() == 3 })
	rcv.check()
	if got := rcv.ackedVersions("s"); !slices.Equal(got, versions(1, 3)) {
		t.Errorf("versions %v, want 1..3", got)
	}
	if n := rcv.requests(); n != 3 {
		t.Errorf("%d requests, want 3: version 1's outcome was recorded before the stop", n)
	}
}

// TestRedeliverFromATime: a redelivery from a time sends the user's
// entries from the first at or after it, in order; a user's rows page one
// at a time, newest version first.
func testRedeliverFromATime(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	rcv := newReceiver(t, nil)
	ep := f.endpoint(rcv)
	var obs observed
	d := f.dispatcher(dispatch.Options{Observer: obs.observer()})
	for i := range 4 {
		if i == 2 {
			f.clk.Add(time.Hour)
		}
		f.apply(ledger.EntryGrant, ledger.Request{UserID: "t", RequestID: fmt.Sprint("g", i), Amount: "1"})
	}
	f.feed(f.entries("t"), d)
	waitFor(t, "the four events", func() bool { return rcv.ackedCount() == 4 })
	n, err := d.Redeliver(context.Background(), dispatch.Redelivery{EndpointID: ep.ID, UserID: "t", StartTime: f.clk.Now().Add(-30 * time.Minute)})
	if err != nil || n != 2 {
		t.Fatalf("Redeliver from half an hour ago = %d, %v; want 2 (versions 3 and 4)", n, err)
	}
	waitFor(t, "3 and 4 again", func() bool { return rcv.requests() == 6 })
	rcv.check()
	rcv.mu.Lock()
	again := []int64{rcv.log[4].version, rcv.log[5].version}
	rcv.mu.Unlock()
	if !slices.Equal(again, []int64{3, 4}) {
		t.Errorf("redelivered %v, want 3 then 4", again)
	}
	// The lag is the first deliveries' (issue 31: redeliveries, as old as
	// their entries, made the lag alert fire); redeliveries are counted
	// apart.
	settled(t, d)
	obs.mu.Lock()
	lags, redelivered := obs.lags, obs.again
	obs.mu.Unlock()
	if st := d.Status(); lags != 4 || redelivered != 2 || st.Redelivered != 2 || st.Delivered != 6 {
		t.Errorf("observed %d lags and %d redeliveries, status %+v; want 4 lags (first deliveries), 2 redeliveries of 6 delivered", lags, redelivered, st)
	}
	var listed []int64
	token, firstToken := "", ""
	for range 10 {
		rows, next, err := d.ListDeliveries(context.Background(), dispatch.DeliveryQuery{EndpointID: ep.ID, UserID: "t", Page: ledger.Page{PageSize: 1, PageToken: token}})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			listed = append(listed, r.Version)
		}
		if firstToken == "" {
			firstToken = next
		}
		if token = next; token == "" {
			break
		}
	}
	if !slices.Equal(listed, []int64{4, 3, 2, 1}) {
		t.Errorf("paged rows %v, want 4, 3, 2, 1", listed)
	}
	_, _, err = d.ListDeliveries(context.Background(), dispatch.DeliveryQuery{EndpointID: ep.ID, Page: ledger.Page{PageToken: firstToken}})
	if ledger.ReasonOf(err) != ledger.ReasonInvalidPageToken {
		t.Errorf("a user's token for every user's rows: %v, want %s", err, ledger.ReasonInvalidPageToken)
	}
}
