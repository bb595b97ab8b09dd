package dispatchtest

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/ledger"
)

// A queue's write that DynamoDB throttles is written again after a back-off,
// by the dispatcher that holds the claim, and so are the rows of events
// sent directly: every event is delivered once, none sent again, and their
// rows are on the record. (Given up, the 2xx were not recorded: the queue
// waited for its claim to end, 40 s, or the stream's batch was read
// again, and its events were sent a second time.)
func testThrottledQueueWritesAreWrittenAgain(t *testing.T, newEnv NewEnv) {
	t.Parallel()
	for _, queued := range []bool{true, false} {
		f := newFixture(t, newEnv)
		rcv := newReceiver(t, nil)
		rcv.inOrder = true
		ep := f.endpoint(rcv)
		if f.env.Throttled == nil {
			t.Skip("this store's backend does not throttle")
		}
		store, throttled := f.env.Throttled(4)
		d := f.dispatcherOn(store, dispatch.Options{QueueAll: queued})
		for i := range 6 {
			f.apply(ledger.EntryGrant, ledger.Request{UserID: "hot", RequestID: fmt.Sprintf("g%d", i), Amount: "5"})
		}
		entries := f.entries("hot")
		f.feed(entries, d)
		waitFor(t, "every event acknowledged", func() bool { return rcv.ackedCount() == len(entries) })
		settled(t, d)
		rcv.check()
		how := map[bool]string{true: "queued", false: "sent directly"}[queued]
		if got := rcv.ackedVersions("hot"); !slices.Equal(got, versions(1, int64(len(entries)))) {
			t.Errorf("%s: versions acknowledged %v, want 1..%d", how, got, len(entries))
		}
		if throttled() == 0 {
			t.Fatalf("%s: no write was throttled: the test tested nothing", how)
		}
		if n := rcv.requests(); n != len(entries) {
			t.Errorf("%s: %d requests for %d events, %d writes throttled: want each event sent once", how, n, len(entries), throttled())
		}
		rows, _, err := d.ListDeliveries(context.Background(), dispatch.DeliveryQuery{EndpointID: ep.ID, UserID: "hot", States: []dispatch.DeliveryState{dispatch.DeliverySucceeded}})
		if err != nil || len(rows) != len(entries) {
			t.Errorf("%s: ListDeliveries: %d rows SUCCEEDED (%v), want the %d events' on the record", how, len(rows), err, len(entries))
		}
	}
}
