package dynamo

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
	"github.com/pointledger/pointledger/internal/pagetoken"
)

// holdRequest validates a hold, capture or void of user u.
func holdRequest(tb testing.TB, t ledger.EntryType, r ledger.Request) ledger.Mutation {
	tb.Helper()
	if r.UserID == "" {
		r.UserID = "u"
	}
	if t == ledger.EntryHold && r.Expire.IsZero() {
		r.Expire = time.Now().Add(time.Hour)
	}
	m, err := ledger.NewMutation(t, r, ledger.DefaultScale)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// The hold record of the hold of request_id id, as stored.
func holdRecord(tb testing.TB, l *Ledger, user, id string) ledger.Hold {
	tb.Helper()
	h, ok, err := l.holdByRequest(context.Background(), user, id)
	if err != nil || !ok {
		tb.Fatalf("hold %s of %s: %v, found %v", id, user, err, ok)
	}
	return h
}

// A capture, a void and another capture of one hold in one group: the
// first resolves it, and the others are refused as the group leaves it
// (the hold's record, read, would still say HELD). A capture of a hold
// made in the same group waits for the next: a transaction writes a
// hold's record once.
func TestOneGroupResolvesAHoldOnce(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	setup := New(env.Client, Options{Table: env.Ledger})
	mustApply(t, setup, mutation(t, ledger.EntryGrant, "u", "g", "100"))
	mustApply(t, setup, holdRequest(t, ledger.EntryHold, ledger.Request{RequestID: "h1", Amount: "10"}))

	counter := &transactionCounter{API: env.Client}
	h := newHoldFirst(counter, env.Client) // the grant's transaction is not counted
	l := New(h, Options{Table: env.Ledger})
	errs := applyBehind(t, l, h, mutation(t, ledger.EntryGrant, "u", "g2", "1"),
		holdRequest(t, ledger.EntryCapture, ledger.Request{RequestID: "c1", HoldRequestID: "h1", Amount: "4"}),
		holdRequest(t, ledger.EntryRelease, ledger.Request{RequestID: "v1", HoldRequestID: "h1"}),
		holdRequest(t, ledger.EntryCapture, ledger.Request{RequestID: "c1b", HoldRequestID: "h1"}),
		holdRequest(t, ledger.EntryHold, ledger.Request{RequestID: "h2", Amount: "20"}),
		holdRequest(t, ledger.EntryCapture, ledger.Request{RequestID: "c2", HoldRequestID: "h2"}),
	)
	want := []string{"", ledger.ReasonHoldNotHeld, ledger.ReasonHoldNotHeld, "", ""}
	for i, err := range errs {
		if ledger.ReasonOf(err) != want[i] || (err != nil) != (want[i] != "") {
			t.Errorf("call %d: %v, want %q", i, err, want[i])
		}
	}
	if n := counter.n.Load(); n != 2 {
		t.Errorf("%d transactions, want 2: the first four calls, then the capture of the hold they made", n)
	}
	if hr := holdRecord(t, l, "u", "h1"); hr.State != ledger.HoldCaptured || !hr.CapturedAmount.Equal(decimal.NewFromInt(4)) {
		t.Errorf("h1's record = %+v, want captured 4", hr)
	}
	if acct := assertAuditClean(t, l, "u"); !acct.Balance.Equal(decimal.NewFromInt(77)) || !acct.Held.IsZero() {
		t.Errorf("account %+v, want balance 101-4-20 = 77, nothing held", acct)
	}
}

// More holds expire together than one transaction can release (each takes
// its RELEASE and its record's update): the sweeper and the next mutation
// release them over several transactions, then go on.
func TestManyHoldsExpiringTogether(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	clk := ledgertest.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	counter := &transactionCounter{API: env.Client}
	const holds = 100
	l := New(counter, Options{Table: env.Ledger, Now: clk.Now, MaxHolds: holds})
	for _, u := range []string{"swept", "busy"} {
		mustApply(t, l, mutation(t, ledger.EntryGrant, u, "g", "1000"))
		var wg sync.WaitGroup
		for i := range holds {
			wg.Go(func() {
				mustApply(t, l, holdRequest(t, ledger.EntryHold, ledger.Request{UserID: u, RequestID: fmt.Sprint("h", i), Amount: "1", Expire: clk.Now().Add(time.Minute)}))
			})
		}
		wg.Wait()
	}
	clk.Add(time.Minute)
	ctx := context.Background()

	counter.n.Store(0)
	x, err := l.Expire(ctx, "swept")
	if err != nil || x.Entry.Type != ledger.EntryRelease {
		t.Fatalf("expire: %+v, %v; want the last RELEASE", x, err)
	}
	counter.n.Store(0)
	p := mustApply(t, l, mutation(t, ledger.EntryPurchase, "busy", "p", "1000"))
	if p.Entry.Version != 1+2*holds+1 {
		t.Errorf("purchase at version %d, want %d: after the grant, the holds and their releases", p.Entry.Version, 1+holds+holds+1)
	}
	if n := counter.n.Load(); n < 3 {
		t.Errorf("the purchase took %d transactions; %d releases take at least 3", n, holds)
	}
	for _, u := range []string{"swept", "busy"} {
		acct := assertAuditClean(t, l, u)
		if len(acct.Holds) != 0 || !acct.Held.IsZero() || acct.Version != 1+2*holds+map[string]int64{"swept": 0, "busy": 1}[u] {
			t.Errorf("%s: account %+v, want every hold released", u, acct)
		}
		expired, _, err := l.Holds(ctx, u, ledger.HoldQuery{Page: ledger.Page{PageSize: ledger.MaxPageSize}, States: []ledger.HoldState{ledger.HoldExpired}})
		if err != nil || len(expired) != holds {
			t.Errorf("%s: %d holds listed expired (%v), want %d", u, len(expired), err, holds)
		}
	}
}

// raceModes are the ways one user's calls meet: queued in one process and
// committed in groups, one by one, and in two processes whose queues do
// not see each other (only the conditions keep them apart).
var raceModes = []struct {
	name      string
	processes int
	maxBatch  int
}{
	{"group commit", 1, 0},
	{"max batch 1", 1, 1},
	{"two processes", 2, 0},
}

// raceLedgers returns the mode's ledgers on one fresh table.
func raceLedgers(t *testing.T, processes, maxBatch, maxHolds int) []*Ledger {
	t.Helper()
	env := dynamotest.New(t)
	// Two processes retry each other's version moves: many cheap tries.
	retry := Retry{Backoff: Backoff{MaxAttempts: 100, BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond}}
	var ls []*Ledger
	for range processes {
		ls = append(ls, New(env.Client, Options{Table: env.Ledger, Retry: retry, MaxBatch: maxBatch, MaxHolds: maxHolds}))
	}
	return ls
}

// race runs n calls at once, call i on ledger i mod len(ls), and returns
// their answers.
func race(ls []*Ledger, n int, m func(i int) ledger.Mutation) ([]ledger.Result, []error) {
	results, errs := make([]ledger.Result, n), make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = ls[i%len(ls)].Apply(context.Background(), m(i))
		})
	}
	close(start)
	wg.Wait()
	return results, errs
}

// 100 captures and voids of one hold at once, each sent twice: exactly
// one resolves it, once; every other is refused HOLD_NOT_HELD; each second
// sending is the first's answer again.
func TestConcurrentCapturesAndVoidsOfOneHold(t *testing.T) {
	t.Parallel()
	for _, mode := range raceModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			ls := raceLedgers(t, mode.processes, mode.maxBatch, 0)
			mustApply(t, ls[0], mutation(t, ledger.EntryGrant, "u", "g", "50"))
			mustApply(t, ls[0], holdRequest(t, ledger.EntryHold, ledger.Request{RequestID: "h", Amount: "30"}))
			const calls = 100
			request := func(i int) ledger.Mutation {
				if i%2 == 0 {
					return holdRequest(t, ledger.EntryCapture, ledger.Request{RequestID: fmt.Sprint("c", i), HoldRequestID: "h", Amount: "20"})
				}
				return holdRequest(t, ledger.EntryRelease, ledger.Request{RequestID: fmt.Sprint("v", i), HoldRequestID: "h"})
			}
			results, errs := race(ls, 2*calls, func(i int) ledger.Mutation { return request(i % calls) })
			winner := -1
			for i := range calls {
				first, again := errs[i], errs[i+calls]
				switch {
				case first == nil && !results[i].Replayed && again == nil && results[i+calls].Replayed:
				case first == nil && results[i].Replayed && again == nil && !results[i+calls].Replayed: // the second sending won the race
					results[i] = results[i+calls]
				case ledger.ReasonOf(first) == ledger.ReasonHoldNotHeld && ledger.ReasonOf(again) == ledger.ReasonHoldNotHeld:
					continue
				default:
					t.Errorf("call %d: %v and %v (%+v, %+v)", i, first, again, results[i], results[i+calls])
					continue
				}
				if winner >= 0 {
					t.Errorf("calls %d and %d both resolved the hold", winner, i)
				}
				winner = i
				if results[i].Entry.ID != results[i+calls].Entry.ID {
					t.Errorf("call %d: its two answers name entries %s and %s", i, results[i].Entry.ID, results[i+calls].Entry.ID)
				}
			}
			if winner < 0 {
				t.Fatal("no call resolved the hold")
			}
			entries, err := ls[0].EntriesAfter(context.Background(), "u", 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			resolving := 0
			for _, e := range entries {
				if e.HoldRequestID == "h" {
					resolving++
				}
			}
			acct := assertAuditClean(t, ls[0], "u")
			want := decimal.NewFromInt(50)
			if winner%2 == 0 {
				want = decimal.NewFromInt(30)
			}
			if resolving != 1 || acct.Version != 3 || !acct.Held.IsZero() || !acct.Balance.Equal(want) {
				t.Errorf("%d entries resolve the hold; account %+v; want 1, version 3, nothing held, balance %s", resolving, acct, want)
			}
			if hr := holdRecord(t, ls[0], "u", "h"); hr.ResolveVersion != 3 || hr.State == ledger.HoldHeld {
				t.Errorf("the hold's record = %+v, want resolved by entry 3", hr)
			}
		})
	}
}

// 200 authorizations of 1 at once against a balance of 100: exactly 100
// hold, 100 are refused, and nothing more is held than there is.
func TestConcurrentAuthorizations(t *testing.T) {
	t.Parallel()
	raceDebits(t, 100, 200, func(i int) ledger.Mutation {
		return holdRequest(t, ledger.EntryHold, ledger.Request{RequestID: fmt.Sprint("h", i), Amount: "1"})
	})
}

// Purchases and authorizations race for one balance: together they never
// take more than there is.
func TestPurchasesRaceAuthorizations(t *testing.T) {
	t.Parallel()
	raceDebits(t, 50, 100, func(i int) ledger.Mutation {
		if i%2 == 1 {
			return holdRequest(t, ledger.EntryHold, ledger.Request{RequestID: fmt.Sprint("h", i), Amount: "1"})
		}
		return mutation(t, ledger.EntryPurchase, "u", fmt.Sprint("p", i), "1")
	})
}

// raceDebits races n debits of 1 each (debit(i): a purchase or an
// authorization) against a balance of funds, in each of raceModes, and
// checks what they left: exactly funds went through and the rest were
// refused INSUFFICIENT_BALANCE, the account holds what the authorizations
// that went through hold and what is available is 0, and the audit
// (gapless versions, the fold is the account, holds and their records
// agree) is clean.
func raceDebits(t *testing.T, funds, n int, debit func(i int) ledger.Mutation) {
	for _, mode := range raceModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			ls := raceLedgers(t, mode.processes, mode.maxBatch, n)
			mustApply(t, ls[0], mutation(t, ledger.EntryGrant, "u", "g", fmt.Sprint(funds)))
			ms := make([]ledger.Mutation, n)
			for i := range ms {
				ms[i] = debit(i)
			}
			_, errs := race(ls, n, func(i int) ledger.Mutation { return ms[i] })
			ok, held := 0, decimal.Zero
			for i, err := range errs {
				switch ledger.ReasonOf(err) {
				case "":
					ok++
					if ms[i].Type == ledger.EntryHold {
						held = held.Add(ms[i].Amount)
					}
				case ledger.ReasonInsufficientBalance:
				default:
					t.Errorf("%s %s: %v", ms[i].Type, ms[i].RequestID, err)
				}
			}
			acct := assertAuditClean(t, ls[0], "u")
			if ok != funds || !acct.Held.Equal(held) || !acct.Available().IsZero() || acct.Version != int64(funds+1) || len(acct.Holds) != int(held.IntPart()) {
				t.Errorf("%d of %d debits of 1 from %d went through; account: balance %s, held %s (%d holds) at version %d; want %[3]d, available 0, held %s, version %d",
					ok, n, funds, acct.Balance, acct.Held, len(acct.Holds), acct.Version, held, funds+1)
			}
		})
	}
}

// A hold's record resolved behind the ledger's back while the account
// still holds the hold open: its capture fails on the record's condition,
// which no race explains, so it is answered internal, recorded nowhere,
// and nothing is written; the audit reports the record.
func TestACaptureOfAHoldWhoseRecordWasResolvedBehindItsBack(t *testing.T) {
	t.Parallel()
	l, env := newLedger(t, nil, fastRetry)
	mustApply(t, l, mutation(t, ledger.EntryGrant, "u", "g", "10"))
	mustApply(t, l, holdRequest(t, ledger.EntryHold, ledger.Request{RequestID: "h", Amount: "4"}))
	setAttribute(t, env, "u", holdSK(2), "state", ddbattr.S(string(ledger.HoldVoided)))
	c := holdRequest(t, ledger.EntryCapture, ledger.Request{RequestID: "c", HoldRequestID: "h"})
	_, err := l.Apply(context.Background(), c)
	if _, isDomain := ledger.AsError(err); err == nil || isDomain {
		t.Fatalf("capture of a hold whose record says VOIDED: %v, want an internal error", err)
	}
	a, err := l.Audit(context.Background(), "u")
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Findings) != 1 || a.Findings[0].Kind != ledger.FindingHoldRecord || a.Account.Version != 2 {
		t.Errorf("audit: %v at version %d, want one %s and nothing written", a.Findings, a.Account.Version, ledger.FindingHoldRecord)
	}
	if _, ok, err := l.request(context.Background(), "u", "c"); ok || err != nil {
		t.Errorf("the capture's request record: found %v, %v; want none: an internal error is no answer", ok, err)
	}
}

// The audit finds a ledger's holds damaged: each case edits a sound
// ledger behind its back.
func TestAuditOfHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	set := func(sk, attr string, v types.AttributeValue) func(*testing.T, *dynamotest.Env) {
		return func(t *testing.T, env *dynamotest.Env) { setAttribute(t, env, "u", sk, attr, v) }
	}
	tests := []struct {
		name   string
		damage func(*testing.T, *dynamotest.Env)
		want   []string
	}{
		{"a captured hold's record says voided", set(holdSK(2), "state", ddbattr.S(string(ledger.HoldVoided))), []string{ledger.FindingHoldRecord}},
		{"a captured amount changed", set(holdSK(2), "captured_amount", ddbattr.Decimal(decimal.NewFromInt(3))), []string{ledger.FindingHoldRecord}},
		{"an open hold's record says captured", set(holdSK(4), "state", ddbattr.S(string(ledger.HoldCaptured))), []string{ledger.FindingHoldRecord}},
		{"held changed", set(accountSK, "held", ddbattr.Decimal(decimal.NewFromInt(6))), []string{ledger.FindingHeld}},
		{"a capture spent more than its hold", func(t *testing.T, env *dynamotest.Env) {
			set(entrySK(3), "amount", ddbattr.Decimal(decimal.NewFromInt(-9)))(t, env)
			set(entrySK(3), "balance_after", ddbattr.Decimal(decimal.NewFromInt(91)))(t, env)
			set(entrySK(4), "balance_after", ddbattr.Decimal(decimal.NewFromInt(91)))(t, env)
			set(accountSK, "balance", ddbattr.Decimal(decimal.NewFromInt(91)))(t, env)
			set(holdSK(2), "captured_amount", ddbattr.Decimal(decimal.NewFromInt(9)))(t, env)
		}, []string{ledger.FindingCaptureOverHold, ledger.FindingRequestMismatch}}, // the capture asked for all of its hold
		{"a hold released twice", func(t *testing.T, env *dynamotest.Env) {
			e := ledger.Entry{ID: "01JSTRAY000000000000000000", UserID: "u", Version: 5, Type: ledger.EntryRelease, Amount: decimal.Zero,
				BalanceAfter: decimal.NewFromInt(95), HeldChange: decimal.NewFromInt(-5), HoldRequestID: "h1", Reason: ledger.ReleaseExpired, CreateTime: time.Now().UTC()}
			if _, err := env.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: &env.Ledger, Item: entryItem(e)}); err != nil {
				t.Fatal(err)
			}
			set(accountSK, "version", ddbattr.Int(5))(t, env)
		}, []string{ledger.FindingHeld, ledger.FindingHoldResolved}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, env := newLedger(t, nil, DefaultRetry)
			mustApply(t, l, mutation(t, ledger.EntryGrant, "u", "g", "100"))
			mustApply(t, l, holdRequest(t, ledger.EntryHold, ledger.Request{RequestID: "h1", Amount: "5"}))            // 2
			mustApply(t, l, holdRequest(t, ledger.EntryCapture, ledger.Request{RequestID: "c1", HoldRequestID: "h1"})) // 3
			mustApply(t, l, holdRequest(t, ledger.EntryHold, ledger.Request{RequestID: "h2", Amount: "7"}))            // 4, open
			assertAuditClean(t, l, "u")
			tt.damage(t, env)
			a, err := New(env.Client, Options{Table: env.Ledger}).Audit(ctx, "u")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range a.Findings {
				got = append(got, f.Kind)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("findings %v, want kinds %v", a.Findings, tt.want)
			}
		})
	}
}

// A hold is captured and another made between the pages of an audit: the
// audit reads the account before them, so it leaves their entries and the
// new record for the next audit, and reads the captured hold's record as
// it was then, held.
func TestAnAuditWhileAHoldIsCaptured(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	l := New(env.Client, Options{Table: env.Ledger})
	mustApply(t, l, mutation(t, ledger.EntryGrant, "u", "g", "100"))
	mustApply(t, l, holdRequest(t, ledger.EntryHold, ledger.Request{RequestID: "h1", Amount: "5"}))
	c := &smallPages{API: env.Client, between: func() {
		mustApply(t, l, holdRequest(t, ledger.EntryCapture, ledger.Request{RequestID: "c1", HoldRequestID: "h1"}))
		mustApply(t, l, holdRequest(t, ledger.EntryHold, ledger.Request{RequestID: "h2", Amount: "7"}))
	}}
	a, err := New(c, Options{Table: env.Ledger}).Audit(context.Background(), "u")
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Findings) != 0 || a.Account.Version != 2 || len(a.Entries) != 2 {
		t.Errorf("audit during a capture: findings %v, account at version %d, %d entries; want none, 2 and 2", a.Findings, a.Account.Version, len(a.Entries))
	}
	if acct := assertAuditClean(t, l, "u"); acct.Version != 4 || !acct.Held.Equal(decimal.NewFromInt(7)) {
		t.Errorf("account %+v, want version 4 holding 7", acct)
	}
}

// Items of holds read back as written; the items of a user who never held
// carry none of their attributes, and an account item without them (from
// before holds) holds nothing, its balance all in its buckets.
func TestHoldItems(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	d := decimal.RequireFromString
	draws := []ledger.Draw{{Expire: at.Add(time.Hour), Amount: d("3")}, {Amount: d("2")}}
	for _, e := range []ledger.Entry{
		{Type: ledger.EntryHold, HeldChange: d("5"), HeldAfter: d("5"), ExpireTime: at.Add(time.Minute), Draws: draws, RequestID: "h"},
		{Type: ledger.EntryCapture, Amount: d("-4"), HeldChange: d("-5"), HeldAfter: d("1"), HoldRequestID: "h", Draws: draws[:1], RequestID: "c", RefundedAmount: d("1")},
		{Type: ledger.EntryRelease, HeldChange: d("-1"), HoldRequestID: "h0", Reason: ledger.ReleaseExpired},
		{Type: ledger.EntryGrant, Amount: d("7"), HeldAfter: d("1"), RequestID: "g"},
	} {
		e.ID, e.UserID, e.Version, e.CreateTime, e.BalanceAfter = "01J", "u", 4, at, d("9")
		got, ok, err := decodeEntry(entryItem(e))
		if err != nil || !ok || got.Type != e.Type || !got.HeldChange.Equal(e.HeldChange) || !got.HeldAfter.Equal(e.HeldAfter) || got.HoldRequestID != e.HoldRequestID ||
			got.Reason != e.Reason || !got.ExpireTime.Equal(e.ExpireTime) || len(got.Draws) != len(e.Draws) || !got.RefundedAmount.Equal(e.RefundedAmount) {
			t.Errorf("%s: wrote %+v, read %+v, %v", e.Type, e, got, err)
		}
	}
	grant := entryItem(ledger.Entry{ID: "01J", UserID: "u", Version: 1, Type: ledger.EntryGrant, Amount: d("1"), BalanceAfter: d("1"), RequestID: "g", CreateTime: at})
	for _, name := range []string{"held_change", "held_after", "hold_request_id", "reason", "refunded_amount"} {
		if _, ok := grant[name]; ok {
			t.Errorf("a grant of a user who never held has %s", name)
		}
	}

	open := []ledger.Hold{
		{RequestID: "b", UserID: "u", Amount: d("2"), State: ledger.HoldHeld, ExpireTime: at.Add(time.Hour), CreateTime: at, Version: 7, Draws: draws[1:]},
		{RequestID: "a", UserID: "u", Amount: d("3"), State: ledger.HoldHeld, ExpireTime: at.Add(time.Minute), OrderID: "o", CreateTime: at, Version: 3, Draws: draws[:1]},
	}
	item := key("u", accountSK)
	item["user_id"], item["balance"], item["version"], item["status"] = ddbattr.S("u"), ddbattr.Decimal(d("9")), ddbattr.Int(8), ddbattr.S(string(ledger.StatusActive))
	item["create_time"], item["update_time"] = ddbattr.S(formatTime(at)), ddbattr.S(formatTime(at))
	old, _, err := decodeAccount(item)
	if err != nil || len(old.Holds) != 0 || !old.Held.IsZero() || len(old.Buckets) != 1 || !old.Buckets[0].Amount.Equal(d("9")) {
		t.Errorf("an account from before holds: %+v, %v; want no holds, 9 never expiring", old, err)
	}
	item["held"], item["holds"] = ddbattr.Decimal(d("5")), holdsItem(open)
	acct, _, err := decodeAccount(item)
	if err != nil || len(acct.Holds) != 2 || acct.Holds[0].RequestID != "a" || acct.Holds[1].RequestID != "b" || acct.Holds[0].OrderID != "o" ||
		!acct.Holds[0].ExpireTime.Equal(at.Add(time.Minute)) || len(acct.Holds[1].Draws) != 1 || acct.Holds[1].UserID != "u" {
		t.Errorf("holds read back = %+v, %v; want a then b (version order), as written", acct.Holds, err)
	}
	if len(acct.Buckets) != 1 || !acct.Buckets[0].Amount.Equal(d("4")) {
		t.Errorf("buckets = %+v, want the balance less what is held, 4, never expiring", acct.Buckets)
	}

	captured := ledger.ResolvedHold(open[1], ledger.Entry{Type: ledger.EntryCapture, Version: 9, Amount: d("-2")})
	if got, err := decodeHold(holdItem(captured)); err != nil || !sameHoldRecord(got, captured) || got.Version != 3 || got.OrderID != "o" {
		t.Errorf("hold record: wrote %+v, read %+v, %v", captured, got, err)
	}
}

// A ListHolds page token pages through the user and the states it was
// given for, and nothing else.
func TestHoldsPageTokensAreScoped(t *testing.T) {
	t.Parallel()
	l, _ := newLedger(t, nil, DefaultRetry)
	ctx := context.Background()
	for _, u := range []string{"u", "v"} {
		mustApply(t, l, mutation(t, ledger.EntryGrant, u, "g", "10"))
		for i := range 3 {
			mustApply(t, l, holdRequest(t, ledger.EntryHold, ledger.Request{UserID: u, RequestID: fmt.Sprint("h", i), Amount: "1"}))
		}
	}
	held := []ledger.HoldState{ledger.HoldHeld}
	page, next, err := l.Holds(ctx, "u", ledger.HoldQuery{Page: ledger.Page{PageSize: 1}, States: held})
	if err != nil || len(page) != 1 || next == "" {
		t.Fatalf("first page: %v, %q, %v", page, next, err)
	}
	if page, _, err := l.Holds(ctx, "u", ledger.HoldQuery{Page: ledger.Page{PageSize: 1, PageToken: next}}); err != nil || len(page) != 1 || page[0].RequestID != "h1" {
		t.Errorf("the next page (no states: HELD, as asked first): %v, %v; want h1", page, err)
	}
	for name, q := range map[string]struct {
		user string
		q    ledger.HoldQuery
	}{
		"another user's":         {"v", ledger.HoldQuery{Page: ledger.Page{PageToken: next}, States: held}},
		"other states'":          {"u", ledger.HoldQuery{Page: ledger.Page{PageToken: next}, States: []ledger.HoldState{ledger.HoldHeld, ledger.HoldExpired}}},
		"ListEntries'":           {"u", ledger.HoldQuery{Page: ledger.Page{PageToken: l.tokens.Encode(1, pagetoken.EntriesRead, "u")}}},
		"with the key, negative": {"u", ledger.HoldQuery{Page: ledger.Page{PageToken: l.tokens.Encode(-1, pagetoken.HoldsRead, "u", "[HELD]")}}},
	} {
		if _, _, err := l.Holds(ctx, q.user, q.q); ledger.ReasonOf(err) != ledger.ReasonInvalidPageToken {
			t.Errorf("a token used for %s holds: %v, want %s", name, err, ledger.ReasonInvalidPageToken)
		}
	}
}

// sameHoldRecord says whether two hold records say the same, as an audit
// compares them (ledger.Audit): request, amount, state, expiry, resolution.
func sameHoldRecord(a, b ledger.Hold) bool {
	return a.RequestID == b.RequestID && a.Amount.Equal(b.Amount) && a.State == b.State && a.ExpireTime.Equal(b.ExpireTime) &&
		a.ResolveVersion == b.ResolveVersion && a.CapturedAmount.Equal(b.CapturedAmount)
}
