package dispatchtest

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
	"github.com/pointledger/pointledger/internal/webhook"
)

// TestDirectSendsKeepNoQueue: the events of users with nothing waiting are
// sent by Apply itself: every one arrives, in order, each row SUCCEEDED
// with its one attempt logged, and no queue is left (a queue exists only
// while something waits). A redelivery to every user finds them by their
// rows.
func testDirectSendsKeepNoQueue(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	rcv := newReceiver(t, nil)
	rcv.inOrder = true
	ep := f.endpoint(rcv)
	d := f.dispatcher(dispatch.Options{})
	users := ledgertest.Users("k", 5)
	for _, u := range users {
		for i := range 3 {
			f.apply(ledger.EntryGrant, ledger.Request{UserID: u, RequestID: fmt.Sprint("g", i), Amount: "1"})
		}
	}
	f.feed(f.entries(users...), d)
	// Apply returned: what it sent directly is answered and on the record.
	if got := rcv.ackedCount(); got != 15 {
		t.Fatalf("%d events acknowledged once Apply returned, want 15 (sent directly)", got)
	}
	refs := make([]dispatch.QueueRef, len(users))
	for i, u := range users {
		refs[i] = dispatch.QueueRef{EndpointID: ep.ID, UserID: u}
	}
	if qs, err := f.env.Store.ReadQueues(context.Background(), refs); err != nil || len(qs) != 0 {
		t.Fatalf("queues %+v, %v: want none after direct sends", qs, err)
	}
	for _, u := range users {
		if got := rcv.ackedVersions(u); !slices.Equal(got, versions(1, 3)) {
			t.Errorf("%s: %v, want 1..3", u, got)
		}
		for v := int64(1); v <= 3; v++ {
			r := rowOf(t, d, ep.ID, u, v)
			if r.State != dispatch.DeliverySucceeded || r.Attempts != 1 || !slices.Equal(statuses(r.Log), []int{http.StatusNoContent}) {
				t.Errorf("%s v%d: row %+v, want SUCCEEDED with one 204 logged", u, v, r)
			}
			checkLog(t, r.Log)
		}
	}
	rcv.check()
	n, err := d.Redeliver(context.Background(), dispatch.Redelivery{EndpointID: ep.ID})
	if err != nil || n != 15 {
		t.Fatalf("Redeliver to every user = %d, %v; want 15 (the users found by their rows)", n, err)
	}
	waitFor(t, "the redelivery", func() bool { return rcv.requests() == 30 })
	settled(t, d)
	if qs, err := f.env.Store.ReadQueues(context.Background(), refs); err != nil || len(qs) != 0 {
		t.Errorf("queues %+v, %v: want none once the redelivery is done (a release deletes the queue)", qs, err)
	}
}

// TestDirectFailureParksTheUser: a direct attempt without a 2xx parks its
// user behind the event: the user's later events wait for it (in order),
// the failed attempt is on the event's row, and other users go on.
func testDirectFailureParksTheUser(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	failed := false
	rcv := newReceiver(t, func(_ int, a arrival) int {
		if a.user == "p" && a.version == 2 && !failed {
			failed = true // the receiver serves one request at a time per user
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	rcv.inOrder = true
	ep := f.endpoint(rcv)
	d := f.dispatcher(dispatch.Options{})
	for _, u := range []string{"p", "q"} {
		for i := range 4 {
			f.apply(ledger.EntryGrant, ledger.Request{UserID: u, RequestID: fmt.Sprint("g", i), Amount: "1"})
		}
	}
	f.feed(f.entries("p", "q"), d)
	waitFor(t, "every event delivered", func() bool { return rcv.ackedCount() == 8 })
	settled(t, d)
	rcv.check()
	for _, u := range []string{"p", "q"} {
		if got := rcv.ackedVersions(u); !slices.Equal(got, versions(1, 4)) {
			t.Errorf("%s: %v, want 1..4", u, got)
		}
	}
	r := rowOf(t, d, ep.ID, "p", 2)
	if r.State != dispatch.DeliverySucceeded || !slices.Equal(statuses(r.Log), []int{500, 200}) {
		t.Errorf("p v2: row %+v, want SUCCEEDED with [500 200] logged", r)
	}
	checkLog(t, r.Log)
	if got := rcv.requests(); got != 9 {
		t.Errorf("%d requests, want 9: each event once, p's v2 twice", got)
	}
	qs, err := f.env.Store.ReadQueues(context.Background(), []dispatch.QueueRef{{EndpointID: ep.ID, UserID: "p"}})
	if err != nil || len(qs) != 0 {
		t.Errorf("p's queue %+v, %v: want none once it is drained", qs, err)
	}
}

// TestManyQueuesAndRowsAtOnce: ReadQueues of 250 users finds exactly the
// 150 with a queue, and PutRows of 250 rows writes each of them (more than
// one call's worth of each, as a stream batch of many users asks).
func testManyQueuesAndRowsAtOnce(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	ctx := context.Background()
	ep := f.endpoint(newReceiver(t, nil))
	var refs []dispatch.QueueRef
	var rows []dispatch.Row
	for i := range 250 {
		ref := dispatch.QueueRef{EndpointID: ep.ID, UserID: fmt.Sprintf("m%03d", i)}
		refs = append(refs, ref)
		if i%5 < 3 {
			if _, _, ok, err := f.env.Store.MarkWanted(ctx, ref, dispatch.Mark{First: 1, Last: 2, Now: f.clk.Now()}); err != nil || !ok {
				t.Fatalf("mark %s: %v, %v", ref.UserID, ok, err)
			}
		}
		rows = append(rows, dispatch.Row{
			EndpointID: ep.ID, Event: webhook.Event{ID: fmt.Sprintf("ev%03d", i), Type: ledger.EventPointsGranted, UserID: ref.UserID, Version: 1},
			State: dispatch.DeliverySucceeded, Attempts: 1, Status: http.StatusNoContent,
			Attempt: dispatch.Attempt{Time: f.clk.Now(), Status: http.StatusNoContent},
		})
	}
	qs, err := f.env.Store.ReadQueues(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	for i, ref := range refs {
		q, ok := qs[ref]
		if ok != (i%5 < 3) || (ok && (q.Wanted != 2 || q.Done != 0)) {
			t.Errorf("%s: queue %+v, %v; want one (wanting 2, done 0) for every 5th user's first 3", ref.UserID, q, ok)
		}
	}
	if len(qs) != 150 {
		t.Errorf("%d queues read, want 150", len(qs))
	}
	if err := f.env.Store.PutRows(ctx, rows); err != nil {
		t.Fatal(err)
	}
	got := pages(t, f.dispatcher(dispatch.Options{}), dispatch.DeliveryQuery{EndpointID: ep.ID, States: []dispatch.DeliveryState{dispatch.DeliverySucceeded}}, 100, 4)
	if len(got) != 250 {
		t.Errorf("%d SUCCEEDED rows listed, want the 250 written", len(got))
	}
	for _, r := range got {
		if r.Attempts != 1 || len(r.Log) != 1 {
			t.Errorf("row %+v: want one attempt, logged", r)
		}
	}
}
