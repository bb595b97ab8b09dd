package drive

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/shopspring/decimal"
)

// returns: each step is one thing a shop does for a user picked uniformly:
// grants an order's points with a return window (pending for ReturnWindow,
// then spendable), a purchase, or a return of an order granted earlier,
// which takes its points back (ReverseGrant), all of them or half. The
// order to return is picked at random among the user's, so that some are
// returned while pending and some after they matured, and some after the
// user spent them (refused, INSUFFICIENT_BALANCE, when available is short).
// Every user is seeded with -grant, spendable at once.
type returns struct {
	p      *Params
	mu     sync.Mutex
	orders map[string][]Op // by user: acknowledged grants not yet returned
}

// ReturnWindow is how long the returns scenario's grants stay pending:
// short, so that most mature within a run and every one before the run's
// checks (which wait for the sweeper to put them on the record).
const ReturnWindow = 3 * time.Second

// returnShares are the steps' shares in percent: grants of an order, purchases, returns.
var returnShares = [...]int{40, 35, 25}

func (r *returns) Setup(ctx context.Context, send Sender) error {
	r.orders = map[string][]Op{}
	return r.p.grantAll(ctx, send, r.p.Users)
}

func (r *returns) Step(ctx context.Context, rng *rand.Rand, send Sender) {
	user := r.p.userName(rng.IntN(r.p.Users))
	switch x := rng.IntN(100); {
	case x < returnShares[0]:
		o := Op{Kind: "grant", User: user, RequestID: r.p.newID("order"), Amount: r.p.Amount.Mul(decimal.NewFromInt(int64(1 + rng.IntN(3)))), Effective: ReturnWindow}
		if send(ctx, o).Code == "ok" {
			r.mu.Lock()
			r.orders[user] = append(r.orders[user], o)
			r.mu.Unlock()
		}
	case x < returnShares[0]+returnShares[1]:
		send(ctx, Op{Kind: "purchase", User: user, RequestID: r.p.newID("p"), Amount: r.p.Amount})
	default:
		r.mu.Lock()
		orders := r.orders[user]
		if len(orders) == 0 {
			r.mu.Unlock()
			send(ctx, Op{Kind: "purchase", User: user, RequestID: r.p.newID("p"), Amount: r.p.Amount})
			return
		}
		i := rng.IntN(len(orders))
		order := orders[i]
		r.orders[user] = slices.Delete(slices.Clone(orders), i, i+1) // returned once, wholly or in half
		r.mu.Unlock()
		amount := order.Amount
		if rng.IntN(2) == 0 {
			amount = amount.Div(decimal.NewFromInt(2)).Truncate(2)
		}
		send(ctx, Op{Kind: "reverse", User: user, RequestID: r.p.newID("ret"), Amount: amount, Grant: order.RequestID})
	}
}
