package dispatchtest

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/ledger"
)

// readCounting is a store that counts the users ReadQueues is asked about.
type readCounting struct {
	dispatch.Store
	users atomic.Int64
}

func (s *readCounting) ReadQueues(ctx context.Context, refs []dispatch.QueueRef) (map[dispatch.QueueRef]dispatch.Queue, error) {
	s.users.Add(int64(len(refs)))
	return s.Store.ReadQueues(ctx, refs)
}

// arrivals returns user's requests in arrival order.
func (r *receiver) arrivals(user string) []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []int64
	for _, a := range r.log {
		if a.user == user {
			out = append(out, a.version)
		}
	}
	return out
}

// grantEach writes one grant for each of users, request id rid.
func (f *fixture) grantEach(rid string, users ...string) []ledger.Entry {
	f.t.Helper()
	var out []ledger.Entry
	for _, u := range users {
		res := f.apply(ledger.EntryGrant, ledger.Request{UserID: u, RequestID: rid, Amount: "1"})
		out = append(out, res.Entry)
	}
	return out
}

// TestRedeliveryFencesRememberedUsers: a dispatcher reads a batch's users
// for their queues once and remembers those without one (their next
// batches read nothing); a redelivery, asked of another dispatcher, counts
// itself on the endpoint, so that the first batch with an entry written
// after it reads its users again: the redelivered user's new event waits
// behind the events sent again (it is not sent directly, ahead of them),
// and the other user's is sent directly.
func testRedeliveryFencesRememberedUsers(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	gate := make(chan struct{})
	var redelivered atomic.Int64
	rcv := newReceiver(t, func(_ int, a arrival) int {
		if a.user == "a" && a.version <= 2 && redelivered.Load() > 0 {
			<-gate // the events sent again wait until the new event was applied
		}
		return http.StatusNoContent
	})
	var open sync.Once
	release := func() { open.Do(func() { close(gate) }) }
	t.Cleanup(release) // before the receiver closes, whatever failed
	ep := f.endpoint(rcv)
	store := &readCounting{Store: f.env.Store}
	d := f.dispatcherOn(store, dispatch.Options{})
	other := f.dispatcher(dispatch.Options{})

	f.feed(f.grantEach("g1", "a", "b"), d)
	if got := store.users.Load(); got != 2 {
		t.Fatalf("first batch: %d users read for their queues, want 2", got)
	}
	f.feed(f.grantEach("g2", "a", "b"), d)
	if got := store.users.Load(); got != 2 {
		t.Fatalf("second batch: %d users read in all, want still 2 (both remembered without a queue)", got)
	}
	redelivered.Store(1)
	n, err := other.Redeliver(context.Background(), dispatch.Redelivery{EndpointID: ep.ID, UserID: "a", FromVersion: 1})
	if err != nil || n != 2 {
		t.Fatalf("Redeliver = %d, %v; want 2", n, err)
	}
	f.clk.Add(time.Second) // the next entries are written after the redelivery answered
	f.feed(f.grantEach("g3", "a", "b"), d)
	if got := store.users.Load(); got != 4 {
		t.Errorf("batch after the redelivery: %d users read in all, want 4 (both read again)", got)
	}
	if got := rcv.arrivals("a"); slices.Contains(got, 3) {
		t.Fatalf("a's v3 arrived (%v) while the redelivered v1 and v2 were held: sent directly, ahead of them", got)
	}
	if got := rcv.ackedVersions("b"); !slices.Equal(got, versions(1, 3)) {
		t.Errorf("b: %v acknowledged once Apply returned, want 1..3 (sent directly)", got)
	}
	release()
	waitFor(t, "a's events", func() bool { return len(rcv.arrivals("a")) >= 5 })
	settled(t, d)
	settled(t, other)
	if got := rcv.arrivals("a"); !slices.Equal(got, []int64{1, 2, 1, 2, 3}) {
		t.Errorf("a's requests %v, want [1 2 1 2 3]: v3 after the events sent again", got)
	}
	rcv.check()
}

// TestShardTakenForgetsUsers: a dispatcher that takes a stream shard
// (ShardTaken) forgets the users it remembered without a queue, since the
// process that held the shard meanwhile may have made their queues: a user
// parked there gets its next event behind the parked one, in order.
func testShardTakenForgetsUsers(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	var mu sync.Mutex
	healed := false
	rcv := newReceiver(t, func(_ int, a arrival) int {
		mu.Lock()
		defer mu.Unlock()
		if a.user == "a" && a.version == 2 && !healed {
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	})
	rcv.inOrder = true
	f.endpoint(rcv)
	d := f.dispatcher(dispatch.Options{})
	f.feed(f.grantEach("g1", "a"), d) // a remembered without a queue
	// The shard moves to another process, which parks a behind v2.
	other := f.dispatcher(dispatch.Options{})
	f.feed(f.grantEach("g2", "a"), other)
	waitFor(t, "a's v2 refused", func() bool { return len(rcv.arrivals("a")) >= 2 })
	// The shard comes back.
	d.ShardTaken("shard-1")
	f.feed(f.grantEach("g3", "a"), d)
	if got := rcv.arrivals("a"); slices.Contains(got, 3) {
		t.Fatalf("a's v3 arrived (%v) while v2 was parked: sent directly, ahead of it", got)
	}
	mu.Lock()
	healed = true
	mu.Unlock()
	waitFor(t, "a's events", func() bool { return len(rcv.ackedVersions("a")) == 3 })
	settled(t, d)
	settled(t, other)
	if got := rcv.ackedVersions("a"); !slices.Equal(got, versions(1, 3)) {
		t.Errorf("a: %v, want 1..3 in order", got)
	}
	rcv.check()
}

// TestSlowDirectAttemptIsEndedAndQueued: a receiver that does not answer a
// direct attempt within the time a direct send allows does not hold the
// stream's batch (Apply returns while the receiver still holds the
// request): the attempt is logged as failed, the user parked behind it,
// and the event delivered by its queue once the receiver answers, in
// order.
func testSlowDirectAttemptIsEndedAndQueued(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	f := newFixture(t, newEnv)
	gate := make(chan struct{})
	var open sync.Once
	release := func() { open.Do(func() { close(gate) }) }
	var held atomic.Int64
	rcv := newReceiver(t, func(_ int, a arrival) int {
		if a.user == "s" && a.version == 1 && held.Add(1) == 1 {
			<-gate // the first attempt: no answer until the test says
		}
		return http.StatusNoContent
	})
	t.Cleanup(release)
	ep := f.endpoint(rcv)
	d := f.dispatcher(dispatch.Options{})
	f.grantEach("g1", "s")
	f.grantEach("g2", "s")
	f.feed(f.entries("s"), d) // returns with the receiver still holding v1
	release()
	waitFor(t, "s's events", func() bool { return len(rcv.ackedVersions("s")) == 2 })
	settled(t, d)
	if got := rcv.ackedVersions("s"); !slices.Equal(got, versions(1, 2)) {
		t.Errorf("s: %v, want 1..2 in order", got)
	}
	r := rowOf(t, d, ep.ID, "s", 1)
	if r.State != dispatch.DeliverySucceeded || len(r.Log) != 2 || r.Log[0].Status != 0 ||
		!strings.Contains(r.Log[0].Error, "which a direct send allows") || r.Log[1].Status != http.StatusNoContent {
		t.Errorf("s v1: %+v, want SUCCEEDED, its first attempt ended without an answer (a direct send's limit), then a 204", r)
	}
	rcv.check()
}
