package check

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/projection"
	"github.com/pointledger/pointledger/internal/reconcile"
	"github.com/pointledger/pointledger/loadtest/drive"
	"github.com/pointledger/pointledger/loadtest/report"
)

func TestMain(m *testing.M) { dynamotest.Main(m) }

// The checks run against DynamoDB Local: a ledger written for real, and a
// book that claims what the load test saw.
func TestCheckFindsWhatTheBookAndTheLedgerDisagreeOn(t *testing.T) {
	env := dynamotest.New(t)
	ctx := context.Background()
	store := dynamo.New(env.Client, dynamo.Options{Table: env.Ledger})
	history := projection.NewHistory(env.Client, env.History, store, nil)
	c := &Checker{Ledger: store, Reconciler: reconcile.New(store, history, projection.NewLeaseTable(env.Client, env.Leases, nil))}

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
	send := func(b *Book, kind, user, rid, amount, code string, e ledger.Entry) {
		o := drive.Op{Kind: kind, User: user, RequestID: rid, Amount: decimal.RequireFromString(amount)}
		b.Sending(o)
		b.Answered(o, drive.Outcome{Code: code, EntryID: e.ID, Version: e.Version})
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

	b := NewBook()
	send(b, "grant", "alice", "g1", "100", "ok", g)
	send(b, "purchase", "alice", "p1", "10", "ok", p1)
	send(b, "purchase", "alice", "p2", "5", "deadline_exceeded", p2)
	send(b, "purchase", "alice", "p4", "7", "ok", p1) // acknowledged, yet not in the ledger
	send(b, "grant", "bob", "g-bob", "2", "ok", gb)
	send(b, "purchase", "bob", "pb1", "1", "ok", pb1)
	send(b, "purchase", "bob", "pb2", "1", "ok", pb2)
	probe := drive.Op{Kind: "purchase", User: "alice", RequestID: "p1", Amount: decimal.NewFromInt(11), Expect: "already_exists"}
	b.Answered(probe, drive.Outcome{Code: "ok"}) // a reused id with another amount was accepted

	inv, err := c.Check(ctx, b, map[string]int{"bob": 1})
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
	b = NewBook()
	send(b, "grant", "alice", "g1", "100", "ok", g)
	send(b, "purchase", "alice", "p1", "10", "ok", p1)
	send(b, "purchase", "alice", "p2", "5", "unavailable", ledger.Entry{})
	send(b, "purchase", "alice", "p3", "1", "deadline_exceeded", ledger.Entry{})
	send(b, "grant", "bob", "g-bob", "2", "ok", gb)
	send(b, "purchase", "bob", "pb1", "1", "ok", pb1)
	send(b, "purchase", "bob", "pb2", "1", "ok", pb2)
	send(b, "grant", "carol", "g-carol", "10", "ok", gc)
	send(b, "purchase", "carol", "pc", "2", "aborted", ledger.Entry{}) // not applied...
	probe = drive.Op{Kind: "purchase", User: "carol", RequestID: "pc", Amount: decimal.NewFromInt(3), Expect: "already_exists"}
	b.Answered(probe, drive.Outcome{Code: "ok", EntryID: pc.ID, Version: pc.Version}) // ...so the probe was
	if inv, err = c.Check(ctx, b, map[string]int{"bob": 2}); err != nil {
		t.Fatal(err)
	}
	if !inv.OK() {
		t.Errorf("violations on an honest book:\n%s", strings.Join(inv.Violations, "\n"))
	}
}

// Expirations and the releases of expired holds are the ledger's own
// entries: no request asked for them, and they are not strangers. An entry
// without a request id of any other type is.
func TestMatchBookLeavesOutWhatTheLedgerWroteItself(t *testing.T) {
	d := decimal.RequireFromString
	b := NewBook()
	g := drive.Op{Kind: "grant", User: "u", RequestID: "g", Amount: d("10")}
	a := drive.Op{Kind: "authorize", User: "u", RequestID: "a", Amount: d("4")}
	for _, o := range []drive.Op{g, a} {
		b.Sending(o)
		b.Answered(o, drive.Outcome{Code: "ok", EntryID: "e-" + o.RequestID})
	}
	entries := []ledger.Entry{
		{ID: "e-g", Version: 1, Type: ledger.EntryGrant, Amount: d("10"), RequestID: "g"},
		{ID: "e-a", Version: 2, Type: ledger.EntryHold, HeldChange: d("4"), RequestID: "a"},
		{Version: 3, Type: ledger.EntryRelease, HeldChange: d("-4"), Reason: ledger.ReleaseExpired, HoldRequestID: "a"},
		{Version: 4, Type: ledger.EntryExpiration, Amount: d("-10")},
	}
	var inv report.Invariants
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
