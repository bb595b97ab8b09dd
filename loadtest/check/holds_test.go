package check

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/memory"
	"github.com/pointledger/pointledger/internal/ledgertest"
	"github.com/pointledger/pointledger/loadtest/drive"
	"github.com/pointledger/pointledger/loadtest/report"
)

// heldView is a hand-made ledger of user u, as checkHolds reads it: a
// grant of 100, three holds of 10 (a, b, c), a captured for 6, b voided, c
// abandoned and expired; and the book that sent it.
func heldView() (holdsView, *Book) {
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
	b := NewBook()
	for _, o := range []drive.Op{
		{Kind: "grant", User: "u", RequestID: "g", Amount: d("100")},
		{Kind: "authorize", User: "u", RequestID: "a", Amount: d("10")},
		{Kind: "authorize", User: "u", RequestID: "b", Amount: d("10")},
		{Kind: "authorize", User: "u", RequestID: "c", Amount: d("10")},
		{Kind: "capture", User: "u", RequestID: "ca", Hold: "a", Amount: d("6")},
		{Kind: "void", User: "u", RequestID: "vb", Hold: "b", Amount: d("10")},
	} {
		b.Sending(o)
		b.Answered(o, drive.Outcome{Code: "ok"})
	}
	return v, b
}

func sentOf(b *Book) []*sentRequest {
	var out []*sentRequest
	for _, id := range slices.Sorted(maps.Keys(b.sent)) {
		out = append(out, b.sent[id])
	}
	return out
}

func TestCheckHoldsFindsWhatIsWrongWithAHandMadeLedger(t *testing.T) {
	t.Parallel()
	d := decimal.RequireFromString
	for _, c := range []struct {
		name  string
		spoil func(v *holdsView, b *Book)
		want  []string // parts of the violations, each in one
	}{
		{"an honest ledger", func(*holdsView, *Book) {}, nil},
		{"a hold resolved twice", func(v *holdsView, _ *Book) {
			// b, voided, is also released again by expiry.
			v.entries = append(v.entries, ledger.Entry{UserID: "u", Version: 8, Type: ledger.EntryRelease, HeldChange: d("-10"),
				HoldRequestID: "b", Reason: ledger.ReleaseExpired, BalanceAfter: d("94"), HeldAfter: d("-10")})
			v.held = d("-10")
			v.available = d("104")
		}, []string{"hold b resolved 2 times", "held -10, its open holds in ListHolds hold 0"}},
		{"a capture over its hold", func(v *holdsView, b *Book) {
			v.entries[4].Amount = d("-16")
			for i := 4; i < len(v.entries); i++ {
				v.entries[i].BalanceAfter = d("84")
			}
			v.balance, v.available = d("84"), d("84")
			v.holds[0].CapturedAmount = d("16")
			b.sent["ca"].op.Amount = d("16")
		}, []string{"capture ca (entry 5) of 16 exceeds its hold of 10"}},
		{"held is not what the open holds hold", func(v *holdsView, _ *Book) {
			v.holds[2].State = ledger.HoldHeld // c, as if still open
		}, []string{"held 0, its open holds in ListHolds hold 10", "hold c is HELD in ListHolds, EXPIRED on the record", "hold c ended HELD, want EXPIRED"}},
		{"an abandoned hold never released on the record", func(v *holdsView, _ *Book) {
			v.entries = v.entries[:6]
			v.held, v.available = d("10"), d("84")
		}, []string{"hold c has expired, and no RELEASE puts it on the record", "held 10, its open holds in ListHolds hold 0"}},
		{"an acknowledged void that captured", func(v *holdsView, _ *Book) {
			v.entries[5].Reason = ""
			v.entries[5].Type = ledger.EntryCapture
			v.holds[1].State, v.holds[1].CapturedAmount = ledger.HoldCaptured, d("0")
		}, []string{"hold b ended CAPTURED, want VOIDED"}},
		{"a negative available", func(v *holdsView, _ *Book) {
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
	p := &drive.Params{IDs: new(atomic.Int64), Users: 10, Spends: 4, Covers: 2, RunID: "t",
		Amount: decimal.NewFromInt(1), Grant: decimal.NewFromInt(100)}
	p.Users, p.RunFor = 20, time.Minute
	c := drive.NewScenario("checkout", p, false)
	b, rec := NewBook(), drive.NewRecorder()
	rec.Measure(time.Hour)
	send := drive.NewSender(drive.NewConnectExec(client), rec, b)
	if err := c.Setup(ctx, send); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	answered := map[string]map[string]int{} // the steps' outcomes by kind of op, then code
	late := func(ctx context.Context, o drive.Op) drive.Outcome {
		if o.Kind == "capture" || o.Kind == "void" {
			if rng.IntN(10) == 0 {
				clock.Add(drive.HoldTTL) // the capture or void comes too late
			}
		}
		out := send(ctx, o)
		if answered[o.Kind] == nil {
			answered[o.Kind] = map[string]int{}
		}
		answered[o.Kind][out.Code]++
		return out
	}
	for range 600 {
		c.Step(ctx, rng, late)
		clock.Add(150 * time.Millisecond) // 600 steps: 90 s, past every expiring grant
	}
	clock.Add(drive.HoldTTL)
	for _, u := range b.Users() {
		if _, err := store.Expire(ctx, u); err != nil { // the sweeper's pass
			t.Fatal(err)
		}
		if a, _ := store.Balance(ctx, u); due(a, clock.Now()) {
			t.Errorf("%s still has something due after the sweeper's pass", u)
		}
	}

	var inv report.Invariants
	byUser := map[string][]*sentRequest{}
	for _, s := range sentOf(b) {
		byUser[s.op.User] = append(byUser[s.op.User], s)
	}
	for _, u := range b.Users() {
		v, err := readHoldsView(ctx, client, u)
		if err != nil {
			t.Fatal(err)
		}
		matchBook(&inv, u, byUser[u], v.entries)
		inv.Violations = append(inv.Violations, checkHolds(v, byUser[u])...)
		inv.CountHolds(v.holds)
	}
	if !inv.OK() {
		t.Errorf("violations:\n%s", strings.Join(inv.Violations, "\n"))
	}
	t.Logf("holds %v, outcomes %v, entries %d acked %d", inv.Holds, answered, inv.Entries, inv.Acked)
	// Every way a hold ends, and refusals for what was available.
	h := inv.Holds
	if h[ledger.HoldCaptured] < 200 || h[ledger.HoldVoided] < 30 || h[ledger.HoldExpired] < 60 || h[ledger.HoldHeld] != 0 {
		t.Errorf("holds by state %v", h)
	}
	if refused := answered["authorize"]["failed_precondition"]; refused == 0 {
		t.Errorf("no authorization refused: %v", answered)
	}
}
