package drive

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/shopspring/decimal"
)

// returns: orders that can be returned. Each step, on a user picked
// uniformly, is one of: a grant of points earned on an order, pending for
// ReturnWindow, a quarter of them returned at once (reversed before they
// mature); a return of an earlier grant of that user, most often after it
// matured (a user's steps are seconds apart); or a purchase, which only
// matured points can pay. A return takes back part or all of its grant.
//
// Users are seeded with two purchases' worth of spendable points
// (returnsSeedUnits times -amount), so that purchases soon live on matured
// points and some are refused while the user's points are still pending;
// a return after maturity may be refused too, when the user has spent
// them. A tenth of the full returns are followed by a probe: a second
// reversal of the grant, which must be refused.
type returns struct {
	p  *Params
	mu sync.Mutex
	// grants are the acknowledged grants not reversed yet, by user.
	grants map[string][]Op
}

const (
	// ReturnWindow is the effective delay of the returns scenario's
	// grants: short, so that most mature within the run and the checks
	// (which wait for their maturations) find them matured.
	ReturnWindow = 3 * time.Second
	// returnsSeedUnits times -amount: what every user can spend at once.
	returnsSeedUnits = 2
	// earnedUnits: an order earns 1 to earnedUnits times -amount.
	earnedUnits = 6
)

// returnsShares are the shares of a step's kinds, in percent: grants,
// returns, purchases.
var returnsShares = [...]int{40, 20, 40}

func (r *returns) Setup(ctx context.Context, send Sender) error {
	return seed(ctx, send, r.p.Users, func(i int) []Op {
		user := r.p.userName(i)
		return []Op{{Kind: "grant", User: user, RequestID: "grant-" + user, Amount: r.p.Amount.Mul(decimal.NewFromInt(returnsSeedUnits))}}
	})
}

func (r *returns) Step(ctx context.Context, rng *rand.Rand, send Sender) {
	user := r.p.userName(rng.IntN(r.p.Users))
	switch x := rng.IntN(100); {
	case x < returnsShares[0]:
		o := Op{Kind: "grant", User: user, RequestID: r.p.newID("g"), Effective: ReturnWindow,
			Amount: r.p.Amount.Mul(decimal.NewFromInt(int64(1 + rng.IntN(earnedUnits))))}
		if send(ctx, o).Code != "ok" {
			break
		}
		if rng.IntN(4) == 0 { // returned at once: reversed while pending
			r.reverse(context.WithValue(ctx, sentAfterKey{}, true), rng, send, o)
			break
		}
		r.mu.Lock()
		r.grants[user] = append(r.grants[user], o)
		r.mu.Unlock()
	case x < returnsShares[0]+returnsShares[1]:
		if g, ok := r.takeGrant(rng, user); ok {
			r.reverse(ctx, rng, send, g)
		}
	default:
		send(ctx, Op{Kind: "purchase", User: user, RequestID: r.p.newID("p"), Amount: r.p.Amount})
	}
}

// reverse returns part or all of grant g.
func (r *returns) reverse(ctx context.Context, rng *rand.Rand, send Sender, g Op) {
	amount := g.Amount
	if rng.IntN(2) == 0 {
		amount = r.p.Amount.Mul(decimal.NewFromInt(int64(1 + rng.IntN(int(g.Amount.Div(r.p.Amount).IntPart())))))
	}
	out := send(ctx, Op{Kind: "reverse", User: g.User, RequestID: r.p.newID("rv"), Grant: g.RequestID, Amount: amount})
	if out.Code == "ok" && amount.Equal(g.Amount) && rng.IntN(10) == 0 {
		// The ledger must refuse to take back more than the grant gave.
		send(context.WithValue(ctx, sentAfterKey{}, true), Op{Kind: "reverse", User: g.User, RequestID: r.p.newID("rv"),
			Grant: g.RequestID, Amount: r.p.Amount, Expect: "failed_precondition"})
	}
}

// takeGrant takes one of user's grants not reversed yet, if any: a grant
// is returned at most once (in part or in full).
func (r *returns) takeGrant(rng *rand.Rand, user string) (Op, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	gs := r.grants[user]
	if len(gs) == 0 {
		return Op{}, false
	}
	i := rng.IntN(len(gs))
	g := gs[i]
	gs[i] = gs[len(gs)-1]
	r.grants[user] = gs[:len(gs)-1]
	return g, true
}
