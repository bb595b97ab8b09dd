// Package ledgertest drives a real ledger for tests of what is built on it
// (the projection, reconciliation).
package ledgertest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
)

// Applier is the write side of a ledger store.
type Applier interface {
	Apply(ctx context.Context, m ledger.Mutation) (ledger.Result, error)
}

// Users returns n user ids: prefix0, prefix1, ...
func Users(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(prefix, i)
	}
	return out
}

// Storm applies ops random grants, purchases and refunds (partial, of
// earlier purchases) to users, from workers goroutines at once, each request
// sent again until its outcome is known (answered). Refusals for balance or
// refund caps are expected; any other error fails the test. It
// returns the books: for each user, what the acknowledged requests add up
// to, and the numbers acknowledged and refused.
func Storm(tb testing.TB, store Applier, users []string, workers, ops int, seed uint64) Books {
	tb.Helper()
	return storm(tb, store, users, workers, ops, seed, false)
}

// StormWithReturns is Storm with orders that can be returned: half of its
// grants are pending for a return window of up to ReturnWindow from now
// (so most mature while it runs, by the next mutation of their user), and
// a tenth of its requests reverse part of an earlier grant of their user,
// pending or matured. Reversals over what is left of a grant, or over what
// is available once it matured, are expected refusals as well. Its books
// hold what the acknowledged requests add up to: a user's balance plus
// what is still pending.
func StormWithReturns(tb testing.TB, store Applier, users []string, workers, ops int, seed uint64) Books {
	tb.Helper()
	return storm(tb, store, users, workers, ops, seed, true)
}

// ReturnWindow bounds the effective delay of StormWithReturns' pending
// grants: short, so that their maturations are written during the storm.
const ReturnWindow = 300 * time.Millisecond

func storm(tb testing.TB, store Applier, users []string, workers, ops int, seed uint64, returns bool) Books {
	tb.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	purchases, grants := map[string][]string{}, map[string][]string{}
	books := Books{Balances: map[string]decimal.Decimal{}}
	var booksMu sync.Mutex
	var next atomic.Int64
	var wg sync.WaitGroup
	earlier := func(of map[string][]string, u string, rng *rand.Rand) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		if len(of[u]) == 0 {
			return "", false
		}
		return of[u][rng.IntN(len(of[u]))], true
	}
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for {
				i := next.Add(1)
				if i > int64(ops) {
					return
				}
				u := users[rng.IntN(len(users))]
				id := fmt.Sprintf("s%d-%d", seed, i)
				r := ledger.Request{UserID: u, RequestID: id, Amount: fmt.Sprint(1 + rng.IntN(20))}
				typ := ledger.EntryGrant
				switch k := rng.IntN(10); {
				case k < 4:
					if returns && rng.IntN(2) == 0 {
						r.Effective = time.Now().Add(time.Duration(rng.Int64N(int64(ReturnWindow))))
					}
				case k < 8:
					typ = ledger.EntryPurchase
				case k == 8 || !returns:
					p, ok := earlier(purchases, u, rng)
					if !ok {
						continue
					}
					typ, r.PurchaseRequestID, r.Amount = ledger.EntryRefund, p, "1"
				default:
					g, ok := earlier(grants, u, rng)
					if !ok {
						continue
					}
					typ, r.GrantRequestID, r.Amount, r.Reason = ledger.EntryReversal, g, fmt.Sprint(1+rng.IntN(5)), "returned"
				}
				m, err := ledger.NewMutation(typ, r, ledger.DefaultScale)
				if err != nil {
					tb.Error(err)
					return
				}
				err = answered(ctx, store, m)
				switch ledger.ReasonOf(err) {
				case "":
					if err != nil {
						tb.Errorf("%s %s: no answer after retries: %v", typ, id, err)
						return
					}
					mu.Lock()
					switch typ {
					case ledger.EntryPurchase:
						purchases[u] = append(purchases[u], id)
					case ledger.EntryGrant:
						grants[u] = append(grants[u], id)
					default: // nothing later names it
					}
					mu.Unlock()
					booksMu.Lock()
					books.Balances[u] = books.Balances[u].Add(m.Delta())
					books.Acknowledged++
					booksMu.Unlock()
				case ledger.ReasonInsufficientBalance, ledger.ReasonRefundExceedsPurchase, ledger.ReasonReversalExceedsGrant:
					booksMu.Lock()
					books.Refused++
					booksMu.Unlock()
				default:
					tb.Errorf("%s %s: %v", typ, id, err)
				}
			}
		})
	}
	wg.Wait()
	return books
}

// answered applies m until its outcome is known, as a client does: an
// error that says nothing of the outcome (a deadline of a busy machine, a
// lost answer) or asks to try again (aborted, unavailable) is followed by
// the same request, under the same request_id, which the ledger answers
// from its record if the first did commit. Before, such an error has no
// reason and was counted as acknowledged: on a loaded machine a purchase
// that never committed was booked (and then refunded: PURCHASE_NOT_FOUND).
func answered(ctx context.Context, store Applier, m ledger.Mutation) error {
	const attempts = 20
	var err error
	for range attempts {
		if _, err = store.Apply(ctx, m); err == nil {
			return nil
		}
		if e, ok := ledger.AsError(err); ok && e.Kind != ledger.KindAborted && e.Kind != ledger.KindUnavailable && e.Kind != ledger.KindInternal {
			return err // a definite answer: a refusal, or malformed
		}
	}
	return err
}

// Books are what a Storm's answers say the ledger must hold.
type Books struct {
	Balances     map[string]decimal.Decimal // by user: the sum of the acknowledged requests
	Acknowledged int
	Refused      int
}
