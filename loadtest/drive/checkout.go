package drive

import (
	"cmp"
	"context"
	"math/rand/v2"
	"time"

	"github.com/shopspring/decimal"
)

// checkout: each step is one checkout on a user picked uniformly: Authorize
// a cart with a short ttl, then, as its plan says, Capture all of it,
// Capture part of it (the rest is released), Void it, or abandon it: never
// resolve it, so that it expires, released by ledgerd's sweeper or by the
// user's next mutation.
//
// Users are seeded so that some authorizations are refused for what is
// available: four users in five hold plenty (-grant, never expiring); one
// in five (poorEvery) holds a few carts' worth (poorUnits) and soon has
// nothing left, and until then its open holds leave less available than
// its balance. Every user also gets points that expire at some time during
// the run (staggered over it): its holds draw them first, so some expire
// while held, and are spent if captured, expired if released.
type checkout struct {
	p *Params
}

// A fate is what a checkout does with its hold once authorized.
type fate int

const (
	captureAll  fate = iota // Capture with no amount: all of the hold
	capturePart             // Capture less than the hold; the rest is released
	voidHold                // Void: the order was cancelled
	abandon                 // nothing: the hold must expire
)

// checkoutFates are the shares of the fates, in percent. Most checkouts
// complete, as in a shop: 70% are captured, a fifth of those for less than
// the hold (an item out of stock, a discount at the end); 15% are voided
// and 15% abandoned. Voids and abandons are frequent enough that every run
// resolves thousands of holds each way, the sweeper's way included, and
// rare enough that the load stays mostly spending.
var checkoutFates = [...]int{captureAll: 56, capturePart: 14, voidHold: 15, abandon: 15}

const (
	// HoldTTL is the checkouts' hold ttl: short, so that the abandoned
	// ones expire within the run's checks (which wait for them), and long
	// enough that a capture answered within seconds finds its hold.
	HoldTTL = 5 * time.Second
	// cartUnits: a cart is 1 to cartUnits times -amount.
	cartUnits = 10
	// poorEvery: one user in poorEvery is seeded with poorUnits times
	// -amount instead of -grant.
	poorEvery = 5
	poorUnits = 12
	// expiringUnits times -amount are granted to every user, to expire
	// during the run.
	expiringUnits = 10
)

// A checkoutPlan is one step of checkout, drawn before it is sent.
type checkoutPlan struct {
	user    int
	cart    decimal.Decimal // what the Authorize holds
	fate    fate
	capture decimal.Decimal // what a capture spends: the cart, or less
}

func (c *checkout) plan(rng *rand.Rand) checkoutPlan {
	pl := checkoutPlan{user: rng.IntN(c.p.Users)}
	x := rng.IntN(100)
	for f, share := range checkoutFates {
		if x < share {
			pl.fate = fate(f)
			break
		}
		x -= share
	}
	units := 1 + rng.IntN(cartUnits)
	if pl.fate == capturePart {
		units = 2 + rng.IntN(cartUnits-1) // a cart of 2 or more, to leave something to release
		pl.capture = c.p.Amount.Mul(decimal.NewFromInt(int64(1 + rng.IntN(units-1))))
	}
	pl.cart = c.p.Amount.Mul(decimal.NewFromInt(int64(units)))
	if pl.fate == captureAll {
		pl.capture = pl.cart
	}
	return pl
}

// Setup seeds every user: its never-expiring grant (-grant, or a few carts
// for the poor), and points that expire during the run, at one of ten
// times spread over it.
func (c *checkout) Setup(ctx context.Context, send Sender) error {
	runFor := cmp.Or(c.p.RunFor, time.Minute)
	return seed(ctx, send, c.p.Users, func(i int) []Op {
		user := c.p.userName(i)
		base := c.p.Grant
		if i%poorEvery == 0 {
			base = c.p.Amount.Mul(decimal.NewFromInt(poorUnits))
		}
		return []Op{
			{Kind: "grant", User: user, RequestID: "grant-" + user, Amount: base},
			{Kind: "grant", User: user, RequestID: "grant-x-" + user, Amount: c.p.Amount.Mul(decimal.NewFromInt(expiringUnits)),
				TTL: runFor * time.Duration(1+i%10) / 11},
		}
	})
}

func (c *checkout) Step(ctx context.Context, rng *rand.Rand, send Sender) {
	pl := c.plan(rng)
	user := c.p.userName(pl.user)
	hold := Op{Kind: "authorize", User: user, RequestID: c.p.newID("a"), Amount: pl.cart, TTL: HoldTTL}
	if send(ctx, hold).Code != "ok" || pl.fate == abandon {
		return
	}
	// The capture or void goes out once the hold is answered: its latency
	// is its own, not the Authorize's too.
	ctx = context.WithValue(ctx, sentAfterKey{}, true)
	o := Op{Kind: "void", User: user, RequestID: c.p.newID("v"), Hold: hold.RequestID, Amount: pl.cart}
	if pl.fate != voidHold {
		o.Kind, o.RequestID, o.Amount, o.Whole = "capture", c.p.newID("c"), pl.capture, pl.fate == captureAll
	}
	send(ctx, o)
}
