package main

import (
	"context"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/memory"
	"github.com/pointledger/pointledger/internal/ledgertest"
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

func TestDue(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	d := decimal.NewFromInt(5)
	for _, c := range []struct {
		name string
		acct ledger.Account
		want bool
	}{
		{"nothing expires", ledger.Account{Buckets: []ledger.Bucket{{Amount: d}}}, false},
		{"points expire later", ledger.Account{Buckets: []ledger.Bucket{{Expire: now.Add(time.Second), Amount: d}}}, false},
		{"points expired", ledger.Account{Buckets: []ledger.Bucket{{Expire: now, Amount: d}}}, true},
		{"a hold expires later", ledger.Account{Holds: []ledger.Hold{{ExpireTime: now.Add(time.Second), Amount: d}}}, false},
		{"a hold expired", ledger.Account{Holds: []ledger.Hold{{ExpireTime: now.Add(-time.Second), Amount: d}}}, true},
	} {
		if got := due(c.acct, now); got != c.want {
			t.Errorf("%s: due = %v, want %v", c.name, got, c.want)
		}
	}
}

// heldView is a hand-made ledger of user u, as checkHolds reads it: a
// grant of 100, three holds of 10 (a, b, c), a captured for 6, b voided, c
// abandoned and expired; and the book that sent it.
func heldView() (holdsView, *book) {
	d := decimal.RequireFromString
	at := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	v := holdsView{user: "u", balance: d("94"), available: d("94"), held: d("0")}
	add := func(e ledger.Entry) {
		prev := ledger.Entry{}
		if n := len(v.entries); n > 0 {
			prev = v.entries[n-1]
		}
		e.UserID, e.Version, e.ID = "u", prev.Version+1, "e"+strconv.Itoa(len(v.entries)+1)
		e.BalanceAfter, e.HeldAfter = prev.BalanceAfter.Add(e.Amount), prev.HeldAfter.Add(e.HeldChange)
		v.entries = append(v.entries, e)
	}
	add(ledger.Entry{Type: ledger.EntryGrant, Amount: d("100"), RequestID: "g"})
	for _, id := range []string{"a", "b", "c"} {
		add(ledger.Entry{Type: ledger.EntryHold, HeldChange: d("10"), RequestID: id, ExpireTime: at})
	}
	add(ledger.Entry{Type: ledger.EntryCapture, Amount: d("-6"), HeldChange: d("-10"), RequestID: "ca", HoldRequestID: "a"})
	add(ledger.Entry{Type: ledger.EntryRelease, HeldChange: d("-10"), RequestID: "vb", HoldRequestID: "b", Reason: ledger.ReleaseVoided})
	add(ledger.Entry{Type: ledger.EntryRelease, HeldChange: d("-10"), HoldRequestID: "c", Reason: ledger.ReleaseExpired})
	v.holds = []ledger.Hold{
		{RequestID: "a", Amount: d("10"), State: ledger.HoldCaptured, CapturedAmount: d("6"), ExpireTime: at},
		{RequestID: "b", Amount: d("10"), State: ledger.HoldVoided, ExpireTime: at},
		{RequestID: "c", Amount: d("10"), State: ledger.HoldExpired, ExpireTime: at},
	}
	b := newBook()
	for _, o := range []op{
		{kind: "grant", user: "u", requestID: "g", amount: d("100")},
		{kind: "authorize", user: "u", requestID: "a", amount: d("10")},
		{kind: "authorize", user: "u", requestID: "b", amount: d("10")},
		{kind: "authorize", user: "u", requestID: "c", amount: d("10")},
		{kind: "capture", user: "u", requestID: "ca", hold: "a", amount: d("6")},
		{kind: "void", user: "u", requestID: "vb", hold: "b", amount: d("10")},
	} {
		b.sending(o)
		b.answered(o, outcome{code: "ok"})
	}
	return v, b
}

func sentOf(b *book) []*sentRequest {
	var out []*sentRequest
	for _, id := range sortedKeys(b.sent) {
		out = append(out, b.sent[id])
	}
	return out
}

func TestCheckHoldsFindsWhatIsWrongWithAHandMadeLedger(t *testing.T) {
	t.Parallel()
	d := decimal.RequireFromString
	for _, c := range []struct {
		name  string
		spoil func(v *holdsView, b *book)
		want  []string // parts of the violations, each in one
	}{
		{"an honest ledger", func(*holdsView, *book) {}, nil},
		{"a hold resolved twice", func(v *holdsView, _ *book) {
			// b, voided, is also released again by expiry.
			v.entries = append(v.entries, ledger.Entry{UserID: "u", Version: 8, Type: ledger.EntryRelease, HeldChange: d("-10"),
				HoldRequestID: "b", Reason: ledger.ReleaseExpired, BalanceAfter: d("94"), HeldAfter: d("-10")})
			v.held = d("-10")
			v.available = d("104")
		}, []string{"hold b resolved 2 times", "held -10, its open holds in ListHolds hold 0"}},
		{"a capture over its hold", func(v *holdsView, b *book) {
			v.entries[4].Amount = d("-16")
			for i := 4; i < len(v.entries); i++ {
				v.entries[i].BalanceAfter = d("84")
			}
			v.balance, v.available = d("84"), d("84")
			v.holds[0].CapturedAmount = d("16")
			b.sent["ca"].op.amount = d("16")
		}, []string{"capture ca (entry 5) of 16 exceeds its hold of 10"}},
		{"held is not what the open holds hold", func(v *holdsView, _ *book) {
			v.holds[2].State = ledger.HoldHeld // c, as if still open
		}, []string{"held 0, its open holds in ListHolds hold 10", "hold c is HELD in ListHolds, EXPIRED on the record", "hold c ended HELD, want EXPIRED"}},
		{"an abandoned hold never released on the record", func(v *holdsView, _ *book) {
			v.entries = v.entries[:6]
			v.held, v.available = d("10"), d("84")
		}, []string{"hold c has expired, and no RELEASE puts it on the record", "held 10, its open holds in ListHolds hold 0"}},
		{"an acknowledged void that captured", func(v *holdsView, _ *book) {
			v.entries[5].Reason = ""
			v.entries[5].Type = ledger.EntryCapture
			v.holds[1].State, v.holds[1].CapturedAmount = ledger.HoldCaptured, d("0")
		}, []string{"hold b ended CAPTURED, want VOIDED"}},
		{"a negative available", func(v *holdsView, _ *book) {
			v.available = d("-1")
		}, []string{"available -1 is negative", "GetBalance says available -1, not balance 94 - held 0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, b := heldView()
			c.spoil(&v, b)
			got := checkHolds(v, sentOf(b))
			if len(got) != len(c.want) {
				t.Errorf("violations:\n%s\nwant %d", strings.Join(got, "\n"), len(c.want))
			}
			for _, w := range c.want {
				found := false
				for _, g := range got {
					found = found || strings.Contains(g, w)
				}
				if !found {
					t.Errorf("no violation %q in\n%s", w, strings.Join(got, "\n"))
				}
			}
		})
	}
}

// pagedMemory is the memory store with the pages of entries ListEntries
// asks for.
type pagedMemory struct{ *memory.Store }

func (m pagedMemory) Entries(ctx context.Context, user string, q ledger.EntryQuery) ([]ledger.Entry, string, error) {
	size := q.PageSize
	after, _ := strconv.ParseInt(q.PageToken, 10, 64) // "" is 0: the first page
	es, err := m.EntriesAfter(ctx, user, after, size+1)
	if err != nil || len(es) <= size {
		return es, "", err
	}
	return es[:size], strconv.FormatInt(es[size-1].Version, 10), nil
}

// The scenario against ledgerd's API on the memory store, which decides as
// every store must: its ledger after the run, the abandoned holds and
// expired points put on the record as a sweeper would, passes every check.
// The clock moves on at times between an authorization and its capture, so
// that some holds expire before they are resolved.
func TestCheckoutAgainstTheDomainPassesItsChecks(t *testing.T) {
	t.Parallel()
	clock := ledgertest.NewClock(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	store := memory.New(clock.Now)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	service := api.NewLedgerService(pagedMemory{store}, nil, ledger.DefaultScale, log)
	service.SetExpiryPolicy(api.ExpiryPolicy{Now: clock.Now})
	mux := http.NewServeMux()
	mux.Handle(pointledgerv1connect.NewLedgerServiceHandler(service, api.HandlerOptions(log)...))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	client := pointledgerv1connect.NewLedgerServiceClient(srv.Client(), srv.URL)

	ctx := context.Background()
	p := testParams()
	p.users, p.runFor = 20, time.Minute
	c := &checkout{p: p}
	b, rec := newBook(), newRecorder()
	rec.measure(time.Hour)
	send := newSender(&connectExec{c: client}, rec, b)
	if err := c.setup(ctx, send); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	late := func(ctx context.Context, o op) outcome {
		if o.kind == "capture" || o.kind == "void" {
			if rng.IntN(10) == 0 {
				clock.Add(holdTTL) // the capture or void comes too late
			}
		}
		return send(ctx, o)
	}
	for range 600 {
		c.step(ctx, rng, late)
		clock.Add(150 * time.Millisecond) // 600 steps: 90 s, past every expiring grant
	}
	clock.Add(holdTTL)
	for _, u := range b.users() {
		if _, err := store.Expire(ctx, u); err != nil { // the sweeper's pass
			t.Fatal(err)
		}
		if a, _ := store.Balance(ctx, u); due(a, clock.Now()) {
			t.Errorf("%s still has something due after the sweeper's pass", u)
		}
	}

	var inv Invariants
	byUser := map[string][]*sentRequest{}
	for _, s := range sentOf(b) {
		byUser[s.op.user] = append(byUser[s.op.user], s)
	}
	for _, u := range b.users() {
		v, err := readHoldsView(ctx, client, u)
		if err != nil {
			t.Fatal(err)
		}
		matchBook(&inv, u, byUser[u], v.entries)
		inv.Violations = append(inv.Violations, checkHolds(v, byUser[u])...)
		inv.countHolds(v.holds)
	}
	if !inv.OK() {
		t.Errorf("violations:\n%s", strings.Join(inv.Violations, "\n"))
	}
	t.Logf("holds %v, outcomes %v, entries %d acked %d", inv.Holds, rec.codesByOp, inv.Entries, inv.Acked)
	// Every way a hold ends, and refusals for what was available.
	h := inv.Holds
	if h[ledger.HoldCaptured] < 200 || h[ledger.HoldVoided] < 30 || h[ledger.HoldExpired] < 60 || h[ledger.HoldHeld] != 0 {
		t.Errorf("holds by state %v", h)
	}
	if refused := rec.codesByOp["authorize"]["failed_precondition"]; refused == 0 {
		t.Errorf("no authorization refused: %v", rec.codesByOp)
	}
}
