package main

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/projection"
)

func TestMain(m *testing.M) { dynamotest.Main(m) }

// The checks run against DynamoDB Local: a ledger written for real, and a
// book that claims what the load test saw.
func TestCheckFindsWhatTheBookAndTheLedgerDisagreeOn(t *testing.T) {
	env := dynamotest.New(t)
	ctx := context.Background()
	store := dynamo.New(env.Client, dynamo.Options{Table: env.Ledger})
	history := projection.NewHistory(env.Client, env.History, store, nil)
	c := &checker{store: store, history: history, leases: projection.NewLeaseTable(env.Client, env.Leases, nil)}

	apply := func(t ledger.EntryType, user, rid, amount string) ledger.Entry {
		m, err := ledger.NewMutation(t, ledger.Request{UserID: user, RequestID: rid, Amount: amount}, ledger.DefaultScale)
		if err != nil {
			panic(err)
		}
		res, err := store.Apply(ctx, m)
		if err != nil {
			panic(err)
		}
		return res.Entry
	}
	send := func(b *book, kind, user, rid, amount, code string, e ledger.Entry) {
		o := op{kind: kind, user: user, requestID: rid, amount: decimal.RequireFromString(amount)}
		b.sending(o)
		b.answered(o, outcome{code: code, entryID: e.ID, version: e.Version})
	}

	g := apply(ledger.EntryGrant, "alice", "g1", "100")
	p1 := apply(ledger.EntryPurchase, "alice", "p1", "10")
	p2 := apply(ledger.EntryPurchase, "alice", "p2", "5") // applied, but its answer was lost
	apply(ledger.EntryPurchase, "alice", "p3", "1")       // applied, never sent by the load test
	gc := apply(ledger.EntryGrant, "carol", "g-carol", "10")
	pc := apply(ledger.EntryPurchase, "carol", "pc", "3") // a retry-storm probe, applied: its original was not
	gb := apply(ledger.EntryGrant, "bob", "g-bob", "2")   // a double-spend round covering 2 of 1
	pb1 := apply(ledger.EntryPurchase, "bob", "pb1", "1") // ...
	pb2 := apply(ledger.EntryPurchase, "bob", "pb2", "1") // ... two committed
	if _, err := history.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}

	b := newBook()
	send(b, "grant", "alice", "g1", "100", "ok", g)
	send(b, "purchase", "alice", "p1", "10", "ok", p1)
	send(b, "purchase", "alice", "p2", "5", "deadline_exceeded", p2)
	send(b, "purchase", "alice", "p4", "7", "ok", p1) // acknowledged, yet not in the ledger
	send(b, "grant", "bob", "g-bob", "2", "ok", gb)
	send(b, "purchase", "bob", "pb1", "1", "ok", pb1)
	send(b, "purchase", "bob", "pb2", "1", "ok", pb2)
	probe := op{kind: "purchase", user: "alice", requestID: "p1", amount: decimal.NewFromInt(11), expect: "already_exists"}
	b.answered(probe, outcome{code: "ok"}) // a reused id with another amount was accepted

	inv, err := c.check(ctx, b, map[string]int{"bob": 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"alice: entry of request p3, which the load test never sent",
		"alice: acknowledged request p4 has 0 entries",
		"bob: double spend: 2 purchases committed, the grant covered 1",
		"request p1 re-sent with amount 11: answered ok, want already_exists",
	}
	if len(inv.Violations) != len(want) {
		t.Errorf("violations:\n%s\nwant %d", strings.Join(inv.Violations, "\n"), len(want))
	}
	for _, w := range want {
		found := false
		for _, v := range inv.Violations {
			found = found || strings.Contains(v, w)
		}
		if !found {
			t.Errorf("no violation %q in\n%s", w, strings.Join(inv.Violations, "\n"))
		}
	}
	if inv.Acked != 6 || inv.Unacked != 1 {
		t.Errorf("acked %d unacked %d, want 6 and 1", inv.Acked, inv.Unacked)
	}
	// alice 100-10-5-1 = 84, bob 0: what the entries say, whatever the book.
	if inv.Granted != "102" || inv.Spent != "18" || inv.Balances != "84" {
		t.Errorf("conservation figures %s - %s = %s, want 102 - 18 = 84", inv.Granted, inv.Spent, inv.Balances)
	}

	// The same ledger with an honest book: clean.
	b = newBook()
	send(b, "grant", "alice", "g1", "100", "ok", g)
	send(b, "purchase", "alice", "p1", "10", "ok", p1)
	send(b, "purchase", "alice", "p2", "5", "unavailable", ledger.Entry{})
	send(b, "purchase", "alice", "p3", "1", "deadline_exceeded", ledger.Entry{})
	send(b, "grant", "bob", "g-bob", "2", "ok", gb)
	send(b, "purchase", "bob", "pb1", "1", "ok", pb1)
	send(b, "purchase", "bob", "pb2", "1", "ok", pb2)
	send(b, "grant", "carol", "g-carol", "10", "ok", gc)
	send(b, "purchase", "carol", "pc", "2", "aborted", ledger.Entry{}) // not applied...
	probe = op{kind: "purchase", user: "carol", requestID: "pc", amount: decimal.NewFromInt(3), expect: "already_exists"}
	b.answered(probe, outcome{code: "ok", entryID: pc.ID, version: pc.Version}) // ...so the probe was
	if inv, err = c.check(ctx, b, map[string]int{"bob": 2}); err != nil {
		t.Fatal(err)
	}
	if !inv.OK() {
		t.Errorf("violations on an honest book:\n%s", strings.Join(inv.Violations, "\n"))
	}
}

func TestRecorderMeasuresOnlyTheWindow(t *testing.T) {
	rec := newRecorder()
	before := time.Now()
	rec.record("purchase", outcome{code: "ok"}, time.Millisecond, before) // warm-up: not measured
	rec.measure(3 * time.Second)
	now := time.Now()
	rec.record("purchase", outcome{code: "ok"}, 2*time.Millisecond, now)
	rec.record("purchase", outcome{code: "failed_precondition"}, 40*time.Millisecond, now)
	rec.record("balance", outcome{code: "ok"}, 3*time.Millisecond, now.Add(2*time.Second))
	rec.record("purchase", outcome{code: "ok"}, time.Millisecond, now.Add(2*time.Hour)) // after the end
	run := rec.run()
	if run.Requests != 3 || run.OK != 2 || run.Codes["failed_precondition"] != 1 {
		t.Errorf("requests %d ok %d codes %v, want 3, 2 and one failed_precondition", run.Requests, run.OK, run.Codes)
	}
	if run.Latency.Max < 39.9 || run.Latency.Max > 40.1 || run.ByOp["purchase"].Count != 2 || run.ByOp["balance"].Count != 1 {
		t.Errorf("latency %+v by op %+v", run.Latency, run.ByOp)
	}
	if c := run.CodesByOp["purchase"]; c["ok"] != 1 || c["failed_precondition"] != 1 || run.CodesByOp["balance"]["ok"] != 1 {
		t.Errorf("outcomes by op %v, want purchase ok=1 failed_precondition=1, balance ok=1", run.CodesByOp)
	}
	if len(run.Timeline) != 3 || run.Timeline[0].OK != 1 || run.Timeline[0].Errors != 1 || run.Timeline[2].OK != 1 {
		t.Errorf("timeline %+v", run.Timeline)
	}
	var n int64
	for _, b := range run.Histogram {
		n += b.Count
	}
	if n != 3 {
		t.Errorf("histogram holds %d requests, want 3: %+v", n, run.Histogram)
	}
}

func TestParseMix(t *testing.T) {
	mix, err := parseMix("purchase=60, grant=5,refund=10,balance=15,history=10")
	if err != nil || mix["purchase"] != 60 || mix["history"] != 10 || len(mix) != 5 {
		t.Errorf("parseMix = %v, %v", mix, err)
	}
	for _, bad := range []string{"", "purchase", "purchase=-1", "transfer=5", "purchase=0,grant=0", "purchase=x"} {
		if _, err := parseMix(bad); err == nil {
			t.Errorf("parseMix(%q) accepted", bad)
		}
	}
}

func TestZipfFavoursTheFirstUsers(t *testing.T) {
	pick := pickZipf(1000)
	rng := rand.New(rand.NewPCG(1, 2))
	counts := make([]int, 1000)
	for range 100000 {
		counts[pick(rng)]++
	}
	// With exponent 1, user 0 takes 1/H(1000) ~ 13% and user 1 half of it.
	if counts[0] < 11000 || counts[0] > 15000 || counts[1] < counts[0]/3 || counts[1] > counts[0]*2/3 {
		t.Errorf("user 0 picked %d times, user 1 %d, of 100000", counts[0], counts[1])
	}
}

// Expirations and the releases of expired holds are the ledger's own
// entries: no request asked for them, and they are not strangers. An entry
// without a request id of any other type is.
func TestMatchBookLeavesOutWhatTheLedgerWroteItself(t *testing.T) {
	d := decimal.RequireFromString
	b := newBook()
	g := op{kind: "grant", user: "u", requestID: "g", amount: d("10")}
	a := op{kind: "authorize", user: "u", requestID: "a", amount: d("4")}
	for _, o := range []op{g, a} {
		b.sending(o)
		b.answered(o, outcome{code: "ok", entryID: "e-" + o.requestID})
	}
	entries := []ledger.Entry{
		{ID: "e-g", Version: 1, Type: ledger.EntryGrant, Amount: d("10"), RequestID: "g"},
		{ID: "e-a", Version: 2, Type: ledger.EntryHold, HeldChange: d("4"), RequestID: "a"},
		{Version: 3, Type: ledger.EntryRelease, HeldChange: d("-4"), Reason: ledger.ReleaseExpired, HoldRequestID: "a"},
		{Version: 4, Type: ledger.EntryExpiration, Amount: d("-10")},
	}
	var inv Invariants
	matchBook(&inv, "u", []*sentRequest{b.sent["g"], b.sent["a"]}, entries)
	if !inv.OK() || inv.Acked != 2 {
		t.Errorf("violations %v, acked %d: want none and 2", inv.Violations, inv.Acked)
	}
	stranger := ledger.Entry{Version: 5, Type: ledger.EntryPurchase, Amount: d("-1")}
	matchBook(&inv, "u", []*sentRequest{b.sent["g"], b.sent["a"]}, append(entries, stranger))
	if len(inv.Violations) != 1 || !strings.Contains(inv.Violations[0], "never sent") {
		t.Errorf("a purchase without a request id: violations %v, want one of a request never sent", inv.Violations)
	}
}
