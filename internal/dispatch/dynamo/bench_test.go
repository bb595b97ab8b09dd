package dynamo_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/oklog/ulid/v2"

	"github.com/pointledger/pointledger/internal/dispatch"
	dispatchdynamo "github.com/pointledger/pointledger/internal/dispatch/dynamo"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
)

// BenchmarkDeliveryCalls counts the DynamoDB calls the dispatcher makes
// per event delivered, against DynamoDB Local, with a receiver on
// 127.0.0.1 that answers 204 at once. Each op is one event. It reports
// calls/event (every call to the webhooks table and every read of the
// ledger's entries), writes/event, items/event (the items those writes
// put, update or delete: each of a BatchWriteItem's requests and of a
// TransactWriteItems' items, one for a PutItem, UpdateItem or
// DeleteItem: what DynamoDB Local pays for), ledger-reads/event and,
// apart, the
// "due" index's polls per event, which are a fixed 16 a second (their
// share depends on the events a second, so on the machine).
//
//   - many_users: rounds of one entry for each of 100 users, fed to Apply
//     as one stream batch, the next round written once the last is
//     delivered and put on the record: each queue has one event at a
//     time, the steady state of `uniform`.
//   - hot_user: one user's entries, fed in stream batches of 25 as they
//     are written, while the earlier ones are delivered: one queue, in
//     version order.
//
// Run: go test -run '^$' -bench BenchmarkDeliveryCalls -benchtime 2000x ./internal/dispatch/dynamo/
func BenchmarkDeliveryCalls(b *testing.B) {
	b.Run("many_users", func(b *testing.B) { benchDelivery(b, 100, 100, true) })
	b.Run("hot_user", func(b *testing.B) { benchDelivery(b, 1, 25, false) })
}

// benchDelivery writes at least b.N grants over users, a batch of batch
// entries at a time (the clock stopped), and feeds each batch to a
// running dispatcher as the stream would (waiting for its delivery when
// wait is set), and reports the dispatcher's calls.
func benchDelivery(b *testing.B, users, batch int, wait bool) {
	env := dynamotest.New(b)
	ctx := context.Background()
	store := dynamo.New(env.Client, dynamo.Options{Table: env.Ledger, Logger: quiet})
	var received atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		received.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	b.Cleanup(srv.Close)
	if _, _, err := dispatchdynamo.NewEndpoints(env.Client, env.Webhooks, nil).Create(ctx,
		dispatch.Endpoint{URL: srv.URL + "/hook", EventTypes: []string{"*"}}); err != nil {
		b.Fatal(err)
	}

	names := make([]string, users)
	for i := range names {
		names[i] = fmt.Sprintf("b%d", i)
	}
	// write makes the grants of one batch, as the write path would, and
	// returns them as the stream would.
	written := 0
	write := func() []ledger.Entry {
		out := writeGrants(ctx, b, store, names, batch/users)
		written += len(out)
		return out
	}

	db := &countingDB{DB: env.Client}
	led := &countingLedger{Ledger: store}
	d, err := dispatch.New(dispatchdynamo.New(db, env.Webhooks, nil), led, dispatch.Options{
		Sender: sender(10 * time.Second), EncodeEntry: testEntryJSON, Log: quiet,
	})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- d.Run(runCtx) }()
	idle := func(n int64) {
		deadline := time.Now().Add(waitLimit)
		for received.Load() < n || d.Status().InFlight > 0 {
			if time.Now().After(deadline) {
				b.Fatalf("waited %s: %d of %d events received, %d queues in flight", waitLimit, received.Load(), n, d.Status().InFlight)
			}
			time.Sleep(time.Millisecond)
		}
	}
	b.ResetTimer()
	for written < b.N {
		b.StopTimer()
		entries := write()
		b.StartTimer()
		if err := d.Apply(ctx, entries); err != nil {
			b.Fatal(err)
		}
		if wait {
			idle(int64(written))
		}
	}
	idle(int64(written))
	b.StopTimer()
	cancel()
	if err := <-stopped; err != nil {
		b.Fatal(err)
	}
	if got := received.Load(); got != int64(written) {
		b.Fatalf("received %d requests for %d events: each should arrive once", got, written)
	}
	c := db.snapshot()
	c.ledgerReads = led.reads.Load()
	n := float64(written)
	b.ReportMetric(float64(c.total()-c.duePolls+c.ledgerReads)/n, "calls/event")
	b.ReportMetric(float64(c.writes)/n, "writes/event")
	b.ReportMetric(float64(c.items)/n, "items/event")
	b.ReportMetric(float64(c.ledgerReads)/n, "ledger-reads/event")
	b.ReportMetric(float64(c.duePolls)/n, "due-polls/event")
	b.Logf("%d events: %+v", written, c)
}

// writeGrants makes perUser grants of 1 point for each of users, the users
// concurrently, and returns their entries.
func writeGrants(ctx context.Context, b *testing.B, store *dynamo.Ledger, users []string, perUser int) []ledger.Entry {
	var mu sync.Mutex
	var out []ledger.Entry
	var wg sync.WaitGroup
	for _, u := range users {
		wg.Go(func() {
			for range perUser {
				m, err := ledger.NewMutation(ledger.EntryGrant, ledger.Request{UserID: u, RequestID: ulid.Make().String(), Amount: "1"}, ledger.DefaultScale)
				if err != nil {
					panic(err)
				}
				res, err := store.Apply(ctx, m)
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				out = append(out, res.Entry)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	return out
}

// calls counts a dispatcher's calls by kind.
type calls struct {
	byOp        map[string]int64
	writes      int64 // UpdateItem, PutItem, DeleteItem, TransactWriteItems, BatchWriteItem
	items       int64 // the items those writes write
	duePolls    int64 // Query of the "due" index
	ledgerReads int64
}

func (c calls) total() int64 {
	var n int64
	for _, v := range c.byOp {
		n += v
	}
	return n
}

// countingDB is the webhooks table's client, counting each call.
type countingDB struct {
	dispatchdynamo.DB
	mu sync.Mutex
	c  calls
}

func (db *countingDB) count(op string, write, poll bool) { db.countItems(op, write, poll, 1) }

// countItems counts a call that writes items items (a read: 0).
func (db *countingDB) countItems(op string, write, poll bool, items int) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.c.byOp == nil {
		db.c.byOp = map[string]int64{}
	}
	db.c.byOp[op]++
	if write {
		db.c.writes++
		db.c.items += int64(items)
	}
	if poll {
		db.c.duePolls++
	}
}

func (db *countingDB) snapshot() calls {
	db.mu.Lock()
	defer db.mu.Unlock()
	c := db.c
	c.byOp = map[string]int64{}
	for k, v := range db.c.byOp {
		c.byOp[k] = v
	}
	return c
}

func (db *countingDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	db.count("UpdateItem", true, false)
	return db.DB.UpdateItem(ctx, in, opts...)
}

func (db *countingDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	db.countItems("TransactWriteItems", true, false, len(in.TransactItems))
	return db.DB.TransactWriteItems(ctx, in, opts...)
}

func (db *countingDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	db.count("PutItem", true, false)
	return db.DB.PutItem(ctx, in, opts...)
}

func (db *countingDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	db.count("DeleteItem", true, false)
	return db.DB.DeleteItem(ctx, in, opts...)
}

func (db *countingDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	db.count("GetItem", false, false)
	return db.DB.GetItem(ctx, in, opts...)
}

func (db *countingDB) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	n := 0
	for _, reqs := range in.RequestItems {
		n += len(reqs)
	}
	db.countItems("BatchWriteItem", true, false, n)
	return db.DB.BatchWriteItem(ctx, in, opts...)
}

func (db *countingDB) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	db.count("BatchGetItem", false, false)
	return db.DB.BatchGetItem(ctx, in, opts...)
}

func (db *countingDB) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	index := aws.ToString(in.IndexName)
	db.count("Query "+strings.TrimSpace(index), false, index == "due")
	return db.DB.Query(ctx, in, opts...)
}

// countingLedger counts the dispatcher's reads of the ledger's entries.
type countingLedger struct {
	dispatch.Ledger
	reads atomic.Int64
}

func (l *countingLedger) EntriesAfter(ctx context.Context, user string, after int64, limit int) ([]ledger.Entry, error) {
	l.reads.Add(1)
	return l.Ledger.EntriesAfter(ctx, user, after, limit)
}
