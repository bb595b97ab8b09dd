package drive

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

func TestCheckoutPlansInTheirProportions(t *testing.T) {
	t.Parallel()
	c := &checkout{p: testParams()}
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 100000
	fates := map[fate]int{}
	for range n {
		pl := c.plan(rng)
		fates[pl.fate]++
		units := pl.cart.Div(c.p.Amount)
		if !units.IsInteger() || units.LessThan(decimal.NewFromInt(1)) || units.GreaterThan(decimal.NewFromInt(cartUnits)) {
			t.Fatalf("cart %s: want 1 to %d times %s", pl.cart, cartUnits, c.p.Amount)
		}
		if pl.user < 0 || pl.user >= c.p.Users {
			t.Fatalf("user %d of %d", pl.user, c.p.Users)
		}
		switch pl.fate {
		case captureAll:
			if !pl.capture.Equal(pl.cart) {
				t.Fatalf("a whole capture of %s for a cart of %s", pl.capture, pl.cart)
			}
		case capturePart:
			if !pl.capture.IsPositive() || !pl.capture.LessThan(pl.cart) {
				t.Fatalf("a partial capture of %s for a cart of %s", pl.capture, pl.cart)
			}
		case voidHold, abandon:
		}
	}
	for f, share := range checkoutFates {
		if got := float64(fates[fate(f)]) / n * 100; math.Abs(got-float64(share)) > 1 {
			t.Errorf("fate %d: %.1f%% of the plans, want %d%%", f, got, share)
		}
	}
	if captured := float64(fates[captureAll]+fates[capturePart]) / n; captured < 0.69 || captured > 0.71 {
		t.Errorf("%.3f captured, want 0.70", captured)
	}
}

// opLog is a sender that answers as it is told and keeps what was sent.
type opLog struct {
	mu     sync.Mutex
	ops    []Op
	answer func(Op) Outcome
}

func (l *opLog) send(_ context.Context, o Op) Outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ops = append(l.ops, o)
	if l.answer != nil {
		return l.answer(o)
	}
	return Outcome{Code: "ok"}
}

func TestCheckoutSeedsPoorUsersAndPointsThatExpireDuringTheRun(t *testing.T) {
	t.Parallel()
	p := testParams()
	p.RunFor = time.Minute
	log := &opLog{}
	if err := (&checkout{p: p}).Setup(context.Background(), log.send); err != nil {
		t.Fatal(err)
	}
	if len(log.ops) != 2*p.Users {
		t.Fatalf("%d grants for %d users, want two each", len(log.ops), p.Users)
	}
	poor := 0
	for _, o := range log.ops {
		switch {
		case o.TTL > 0:
			if o.TTL >= p.RunFor || !o.Amount.Equal(p.Amount.Mul(decimal.NewFromInt(expiringUnits))) {
				t.Errorf("expiring grant %+v: want %d x amount within the run (%s)", o, expiringUnits, p.RunFor)
			}
		case o.Amount.Equal(p.Grant):
		case o.Amount.Equal(p.Amount.Mul(decimal.NewFromInt(poorUnits))):
			poor++
		default:
			t.Errorf("grant %+v", o)
		}
	}
	if poor != p.Users/poorEvery {
		t.Errorf("%d poor users of %d, want one in %d", poor, p.Users, poorEvery)
	}
}

func TestACheckoutResolvesOnlyTheHoldItWasGiven(t *testing.T) {
	t.Parallel()
	c := &checkout{p: testParams()}
	refused := map[string]bool{}
	log := &opLog{answer: func(o Op) Outcome {
		if o.Kind == "authorize" && len(refused) < 100 && len(o.RequestID)%2 == 0 {
			refused[o.RequestID] = true
			return Outcome{Code: "failed_precondition"}
		}
		return Outcome{Code: "ok"}
	}}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		c.Step(context.Background(), rng, log.send)
	}
	kinds := map[string]int{}
	var last Op
	for _, o := range log.ops {
		kinds[o.Kind]++
		switch o.Kind {
		case "authorize":
			if o.TTL != HoldTTL {
				t.Errorf("authorize with ttl %s, want %s", o.TTL, HoldTTL)
			}
		case "capture", "void":
			if last.Kind != "authorize" || o.Hold != last.RequestID || o.User != last.User || refused[last.RequestID] {
				t.Fatalf("%s %+v after %+v: want it right after the acknowledged authorize of its hold", o.Kind, o, last)
			}
			if o.Kind == "void" && !o.Amount.Equal(last.Amount) || o.Kind == "capture" && o.Amount.GreaterThan(last.Amount) {
				t.Errorf("%s of %s for a hold of %s", o.Kind, o.Amount, last.Amount)
			}
		}
		last = o
	}
	resolved := kinds["capture"] + kinds["void"]
	acked := kinds["authorize"] - len(refused)
	if kinds["authorize"] != 2000 || resolved < acked*80/100 || resolved > acked*90/100 {
		t.Errorf("%v for 2000 steps, %d authorizations acknowledged: want 85%% of them resolved", kinds, acked)
	}
}
