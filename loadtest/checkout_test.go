package main

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
		units := pl.cart.Div(c.p.amount)
		if !units.IsInteger() || units.LessThan(decimal.NewFromInt(1)) || units.GreaterThan(decimal.NewFromInt(cartUnits)) {
			t.Fatalf("cart %s: want 1 to %d times %s", pl.cart, cartUnits, c.p.amount)
		}
		if pl.user < 0 || pl.user >= c.p.users {
			t.Fatalf("user %d of %d", pl.user, c.p.users)
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
	ops    []op
	answer func(op) outcome
}

func (l *opLog) send(_ context.Context, o op) outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ops = append(l.ops, o)
	if l.answer != nil {
		return l.answer(o)
	}
	return outcome{code: "ok"}
}

func TestCheckoutSeedsPoorUsersAndPointsThatExpireDuringTheRun(t *testing.T) {
	t.Parallel()
	p := testParams()
	p.runFor = time.Minute
	log := &opLog{}
	if err := (&checkout{p: p}).setup(context.Background(), log.send); err != nil {
		t.Fatal(err)
	}
	if len(log.ops) != 2*p.users {
		t.Fatalf("%d grants for %d users, want two each", len(log.ops), p.users)
	}
	poor := 0
	for _, o := range log.ops {
		switch {
		case o.ttl > 0:
			if o.ttl >= p.runFor || !o.amount.Equal(p.amount.Mul(decimal.NewFromInt(expiringUnits))) {
				t.Errorf("expiring grant %+v: want %d x amount within the run (%s)", o, expiringUnits, p.runFor)
			}
		case o.amount.Equal(p.grant):
		case o.amount.Equal(p.amount.Mul(decimal.NewFromInt(poorUnits))):
			poor++
		default:
			t.Errorf("grant %+v", o)
		}
	}
	if poor != p.users/poorEvery {
		t.Errorf("%d poor users of %d, want one in %d", poor, p.users, poorEvery)
	}
}

func TestACheckoutResolvesOnlyTheHoldItWasGiven(t *testing.T) {
	t.Parallel()
	c := &checkout{p: testParams()}
	refused := map[string]bool{}
	log := &opLog{answer: func(o op) outcome {
		if o.kind == "authorize" && len(refused) < 100 && len(o.requestID)%2 == 0 {
			refused[o.requestID] = true
			return outcome{code: "failed_precondition"}
		}
		return outcome{code: "ok"}
	}}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 2000 {
		c.step(context.Background(), rng, log.send)
	}
	kinds := map[string]int{}
	var last op
	for _, o := range log.ops {
		kinds[o.kind]++
		switch o.kind {
		case "authorize":
			if o.ttl != holdTTL {
				t.Errorf("authorize with ttl %s, want %s", o.ttl, holdTTL)
			}
		case "capture", "void":
			if last.kind != "authorize" || o.hold != last.requestID || o.user != last.user || refused[last.requestID] {
				t.Fatalf("%s %+v after %+v: want it right after the acknowledged authorize of its hold", o.kind, o, last)
			}
			if o.kind == "void" && !o.amount.Equal(last.amount) || o.kind == "capture" && o.amount.GreaterThan(last.amount) {
				t.Errorf("%s of %s for a hold of %s", o.kind, o.amount, last.amount)
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
