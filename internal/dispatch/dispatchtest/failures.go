package dispatchtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
	"github.com/pointledger/pointledger/internal/webhook"
)

// TestReceiverFailingForAWhile: a receiver that answers 500 to its first
// 15 requests gets every event in the end, in order, duplicates only as
// retries of the same webhook-id.
func testReceiverFailingForAWhile(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	rcv := newReceiver(t, func(n int, _ arrival) int {
		if n <= 15 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	rcv.inOrder = true
	ep := f.endpoint(rcv)
	d := f.dispatcher(dispatch.Options{Schedule: webhook.Schedule{Delays: slices.Repeat([]time.Duration{5 * time.Millisecond}, 20)}})
	users := ledgertest.Users("f", 4)
	for _, u := range users {
		for i := range 5 {
			f.apply(ledger.EntryGrant, ledger.Request{UserID: u, RequestID: fmt.Sprint("g", i), Amount: "1"})
		}
	}
	f.feed(f.entries(users...), d)
	waitFor(t, "every event delivered", func() bool { return rcv.ackedCount() == 20 })
	rcv.check()
	for _, u := range users {
		if got := rcv.ackedVersions(u); !slices.Equal(got, versions(1, 5)) {
			t.Errorf("%s: %v, want 1..5", u, got)
		}
	}
	if rcv.requests() <= 20 {
		t.Errorf("%d requests: the 500s were not retried", rcv.requests())
	}
	settled(t, d)
	rows, _, err := d.ListDeliveries(context.Background(), dispatch.DeliveryQuery{EndpointID: ep.ID, UserID: "f0"})
	if err != nil {
		t.Fatal(err)
	}
	retried := false
	for _, r := range rows {
		if r.State != dispatch.DeliverySucceeded {
			t.Errorf("row %+v, want SUCCEEDED", r)
		}
		retried = retried || r.Attempts > 1
	}
	if !retried {
		t.Errorf("f0's rows show no retry: %+v", rows)
	}
}

// TestReceiverTimesOut: a receiver that hangs past the attempt timeout
// twice gets the events after, in order, and the row says what happened.
func testReceiverTimesOut(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	rcv := newReceiver(t, func(n int, _ arrival) int {
		if n <= 2 {
			return 0 // hang
		}
		return http.StatusNoContent
	})
	rcv.inOrder = true
	f.endpoint(rcv)
	d := f.dispatcher(dispatch.Options{Sender: sender(300 * time.Millisecond), ClaimTTL: time.Minute})
	for i := range 3 {
		f.apply(ledger.EntryGrant, ledger.Request{UserID: "slow", RequestID: fmt.Sprint("g", i), Amount: "1"})
	}
	f.feed(f.entries("slow"), d)
	waitFor(t, "every event delivered", func() bool { return rcv.ackedCount() == 3 })
	rcv.check()
	if got := rcv.ackedVersions("slow"); !slices.Equal(got, versions(1, 3)) {
		t.Errorf("versions %v, want 1..3", got)
	}
	if n := rcv.requests(); n != 5 {
		t.Errorf("%d requests, want 5: two timeouts of the first event, then one each", n)
	}
}

// TestReceiverDownComesBack: events wait, retried, while nothing listens
// at the endpoint, and all go, in order, once it listens again.
func testReceiverDownComesBack(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // down
	rcv := offlineReceiver(t, nil)
	rcv.inOrder = true
	ep, secret, err := f.endpoints.Create(context.Background(), dispatch.Endpoint{URL: "http://" + addr + "/hook", EventTypes: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	rcv.secrets = append(rcv.secrets, secret)
	d := f.dispatcher(dispatch.Options{Schedule: webhook.Schedule{Delays: slices.Repeat([]time.Duration{20 * time.Millisecond}, 1000)}})
	for i := range 4 {
		f.apply(ledger.EntryGrant, ledger.Request{UserID: "down", RequestID: fmt.Sprint("g", i), Amount: "1"})
	}
	f.feed(f.entries("down"), d)
	// The head (version 1) fails; the three behind it are listed as
	// PENDING, newest first, not attempted (issue 32).
	waitFor(t, "three failed attempts", func() bool {
		rows, _, err := d.ListDeliveries(context.Background(), dispatch.DeliveryQuery{EndpointID: ep.ID, UserID: "down"})
		if err != nil || len(rows) != 4 {
			return false
		}
		for i, r := range rows[:3] {
			if r.Version != int64(4-i) || r.State != dispatch.DeliveryPending || r.Attempts != 0 {
				return false
			}
		}
		head := rows[3]
		return head.Version == 1 && head.Attempts >= 3 && head.State == dispatch.DeliveryPending &&
			head.LastStatusCode == 0 && strings.Contains(head.LastError, "refused")
	})
	back, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", addr, err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(rcv.serve))
	_ = srv.Listener.Close()
	srv.Listener = back
	srv.Start()
	t.Cleanup(srv.Close)
	waitFor(t, "every event delivered", func() bool { return rcv.ackedCount() == 4 })
	rcv.check()
	if got := rcv.ackedVersions("down"); !slices.Equal(got, versions(1, 4)) {
		t.Errorf("versions %v, want 1..4", got)
	}
}

// TestGoneDisablesTheEndpoint: a 410 disables the endpoint, with a reason
// that says so, and it gets nothing more while another endpoint goes on.
func testGoneDisablesTheEndpoint(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	gone := newReceiver(t, func(int, arrival) int { return http.StatusGone })
	witness := newReceiver(t, nil)
	ep := f.endpoint(gone)
	f.endpoint(witness)
	var disabled atomic.Int32
	d := f.dispatcher(dispatch.Options{Observer: dispatch.Observer{EndpointDisabled: func(string) { disabled.Add(1) }}})
	f.apply(ledger.EntryGrant, ledger.Request{UserID: "g", RequestID: "g1", Amount: "1"})
	f.feed(f.entries("g"), d)
	waitFor(t, "the endpoint disabled", func() bool {
		e, err := f.endpoints.Get(context.Background(), ep.ID)
		return err == nil && e.Disabled
	})
	e, _ := f.endpoints.Get(context.Background(), ep.ID)
	if !strings.Contains(e.DisabledReason, "410") || disabled.Load() != 1 {
		t.Errorf("disabled with reason %q, observed %d times; want the 410 named, once", e.DisabledReason, disabled.Load())
	}
	for i := 2; i <= 4; i++ {
		f.apply(ledger.EntryGrant, ledger.Request{UserID: "g", RequestID: fmt.Sprint("g", i), Amount: "1"})
	}
	f.feed(f.entries("g"), d)
	waitFor(t, "the witness to get every event", func() bool { return witness.ackedCount() == 4 })
	if n := gone.requests(); n != 1 {
		t.Errorf("the gone endpoint got %d requests, want 1", n)
	}
	gone.check()
	witness.check()
}

// TestLastAttemptThenNextAndRedeliver: an event that fails its last
// attempt is FAILED and the user's next one goes; a redelivery from its
// version fills the gap, in order, with the row counted anew.
func testLastAttemptThenNextAndRedeliver(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	healed, rcv, ep, d := f.secondOfThreeGivenUp(t)
	if got := rcv.ackedVersions("x"); !slices.Equal(got, []int64{1, 3}) {
		t.Errorf("versions %v, want 1 and 3 (2 given up)", got)
	}
	rows, _, err := d.ListDeliveries(context.Background(), dispatch.DeliveryQuery{EndpointID: ep.ID, States: []dispatch.DeliveryState{dispatch.DeliveryFailed}})
	if err != nil || len(rows) != 1 || rows[0].Version != 2 || rows[0].Attempts != 3 || rows[0].LastStatusCode != 503 {
		t.Fatalf("FAILED rows %+v, %v: want version 2 after 3 attempts, last 503", rows, err)
	}
	healed.Store(true)
	n, err := d.Redeliver(context.Background(), dispatch.Redelivery{EndpointID: ep.ID, UserID: "x", FromVersion: 2})
	if err != nil || n != 2 {
		t.Fatalf("Redeliver = %d, %v; want 2 (versions 2 and 3)", n, err)
	}
	waitFor(t, "the gap filled", func() bool { return rcv.requests() == 3+2+2 })
	rcv.check()
	rcv.mu.Lock()
	var tail []int64
	for _, a := range rcv.log[len(rcv.log)-2:] {
		tail = append(tail, a.version)
	}
	rcv.mu.Unlock()
	if !slices.Equal(tail, []int64{2, 3}) {
		t.Errorf("redelivered %v, want 2 then 3", tail)
	}
	settled(t, d)
	rows, _, err = d.ListDeliveries(context.Background(), dispatch.DeliveryQuery{EndpointID: ep.ID, UserID: "x"})
	if err != nil || len(rows) != 3 {
		t.Fatalf("rows %+v, %v", rows, err)
	}
	for _, r := range rows {
		if r.State != dispatch.DeliverySucceeded || (r.Version != 1 && r.Attempts != 1) {
			t.Errorf("row %+v: want SUCCEEDED, a redelivered one at attempt 1", r)
		}
	}
}
