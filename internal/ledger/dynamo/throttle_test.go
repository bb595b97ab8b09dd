package dynamo

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ddbproxy"
	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
)

// throttledLedger is a ledger whose DynamoDB is DynamoDB Local behind the
// proxy's partition limits at scale: real ThrottlingExceptions and
// ThrottlingError cancellations, which the emulator alone never sends.
// With lean, its transactions go through ddbwire, as ledgerd's do.
func throttledLedger(t *testing.T, scale float64, lean bool) (*Ledger, *ddbproxy.Proxy) {
	t.Helper()
	env := dynamotest.New(t)
	p, err := ddbproxy.Start(ddbproxy.Options{Target: env.Endpoint, Limits: ddbproxy.Limits{PartitionScale: scale}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	var db API = dynamolocal.NewClient(p.URL)
	if lean {
		db = leanWrites(t, dynamolocal.NewClient(p.URL))
	}
	return New(db, Options{Table: env.Ledger}), p
}

// untilAnswered applies m as a client does: again, with the same request_id,
// while the answer is unavailable. Anything but an answer or unavailable
// THROTTLED (internal, say) fails the test.
func untilAnswered(t *testing.T, l *Ledger, m ledger.Mutation) (ledger.Result, error) {
	t.Helper()
	for {
		res, err := l.Apply(context.Background(), m)
		e, ok := ledger.AsError(err)
		switch {
		case err == nil:
			return res, nil
		case ok && e.Kind == ledger.KindUnavailable && e.Reason == ledger.ReasonThrottled:
			continue
		case ok && e.Kind.Final():
			return res, err
		}
		t.Errorf("%s %s: %v, want an answer or unavailable/THROTTLED", m.Type, m.RequestID, err)
		return res, err
	}
}

// A hot user over its partition's write units: the throttled groups wait
// for the partition to refill and commit, or answer unavailable/THROTTLED,
// never internal (a throttled request was not carried out); sent again
// until answered, every purchase is on the ledger once. Before, a request
// refused with ThrottlingException was an unknown outcome: internal. The
// same through the SDK client and through ddbwire.
func TestThrottledWritesAreRetriedThenUnavailable(t *testing.T) {
	t.Parallel()
	for _, lean := range []bool{false, true} {
		t.Run(fmt.Sprint("lean writes ", lean), func(t *testing.T) {
			t.Parallel()
			throttledWrites(t, lean)
		})
	}
}

func throttledWrites(t *testing.T, lean bool) {
	l, p := throttledLedger(t, 0.005, lean) // 5 write units a second for the hot user
	if _, err := untilAnswered(t, l, mutation(t, ledger.EntryGrant, "hot", "g", "1000")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			if _, err := untilAnswered(t, l, mutation(t, ledger.EntryPurchase, "hot", fmt.Sprint("p", i), "1")); err != nil {
				t.Errorf("purchase %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if p.Stats().Throttled() == 0 {
		t.Fatal("the proxy throttled nothing: the test did not test throttling")
	}
	acct := assertAuditClean(t, l, "hot")
	if !acct.Balance.Equal(decimal.NewFromInt(960)) || acct.Version != 41 {
		t.Errorf("account %s at version %d, want 960 at 41: each purchase once", acct.Balance, acct.Version)
	}
}

// Reads over the partition's read units are unavailable/THROTTLED, never
// internal: a balance read, and the account read a write starts with. The
// SDK's own retries are off here, so that the proxy's refusal reaches the
// ledger at once: at this scale the partition refills a read unit in
// about 30 s, so the second read of a burst is throttled however slow the
// machine. Before, both were internal.
func TestThrottledReadsAreUnavailable(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	p, err := ddbproxy.Start(ddbproxy.Options{Target: env.Endpoint, Limits: ddbproxy.Limits{PartitionScale: 0.00001}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	noRetries := dynamodb.New(dynamolocal.NewClient(p.URL).Options(), func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 })
	ctx := context.Background()
	isThrottled := func(what string, err error) bool {
		t.Helper()
		if err == nil {
			return false
		}
		if e, ok := ledger.AsError(err); !ok || e.Kind != ledger.KindUnavailable || e.Reason != ledger.ReasonThrottled {
			t.Fatalf("%s: %v, want unavailable/THROTTLED", what, err)
		}
		return true
	}
	reads := New(noRetries, Options{Table: env.Ledger})
	throttled := 0
	for i := range 3 {
		if _, err := reads.Balance(ctx, "reader"); isThrottled(fmt.Sprint("balance read ", i), err) {
			throttled++
		}
	}
	if throttled == 0 {
		t.Fatalf("3 reads in a row, none throttled (the proxy counted %d): the test did not test throttling", p.Stats().Throttled())
	}
	// A ledger that has not cached the account reads it first.
	writes := New(noRetries, Options{Table: env.Ledger})
	_, err = writes.Apply(ctx, mutation(t, ledger.EntryGrant, "reader", "g", "10"))
	if !isThrottled("a grant whose account read is throttled", err) {
		t.Fatal("the grant's account read was not throttled: the partition refilled")
	}
	acct, err := New(env.Client, Options{Table: env.Ledger}).Balance(ctx, "reader")
	if err != nil || acct.Version != 0 {
		t.Errorf("after the refused grant: %+v, %v; want no entry", acct, err)
	}
}
