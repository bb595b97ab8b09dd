package baseline

import (
	"context"
	"strings"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/loadtest/drive"
)

func TestMain(m *testing.M) { dynamotest.MainWithoutStreams(m) }

// sendAll sends a grant of 10, a purchase of 3 and one of 8 (no longer
// covered) to u, one after the other, and checks their answers.
func sendAll(t *testing.T, x drive.Executor) []drive.Outcome {
	t.Helper()
	var outs []drive.Outcome
	for _, c := range []struct {
		op   drive.Op
		want string
	}{
		{drive.Op{Kind: "grant", User: "u", RequestID: "g", Amount: decimal.NewFromInt(10)}, "ok"},
		{drive.Op{Kind: "purchase", User: "u", RequestID: "p", Amount: decimal.NewFromInt(3)}, "ok"},
		{drive.Op{Kind: "purchase", User: "u", RequestID: "q", Amount: decimal.NewFromInt(8)}, "failed_precondition"},
	} {
		out := x.Do(context.Background(), c.op)
		if out.Code != c.want {
			t.Fatalf("%s %s: %+v, want %s", c.op.Kind, c.op.RequestID, out, c.want)
		}
		outs = append(outs, out)
	}
	return outs
}

// assertLedger checks that the ledger's store reads what the baseline
// wrote: u's account at balance 7 and version 2, and the two entries it
// acknowledged.
func assertLedger(t *testing.T, env *dynamotest.Env, outs []drive.Outcome) {
	t.Helper()
	ctx := context.Background()
	store := dynamo.New(env.Client, dynamo.Options{Table: env.Ledger})
	a, err := store.Balance(ctx, "u")
	if err != nil || !a.Balance.Equal(decimal.NewFromInt(7)) || a.Version != 2 || a.Status != ledger.StatusActive {
		t.Errorf("account %+v, %v: want balance 7 at version 2, active", a, err)
	}
	es, err := store.EntriesAfter(ctx, "u", 0, 10)
	if err != nil || len(es) != 2 {
		t.Fatalf("entries %+v, %v: want 2", es, err)
	}
	for i, want := range []ledger.EntryType{ledger.EntryGrant, ledger.EntryPurchase} {
		if es[i].Type != want || es[i].ID != outs[i].EntryID || es[i].Version != outs[i].Version {
			t.Errorf("entry %d = %+v, want a %s acknowledged as %s version %d", i+1, es[i], want, outs[i].EntryID, outs[i].Version)
		}
	}
}

// The naive baseline writes without conditions, yet the ledger's own
// items: the store reads them as its own. With nothing racing, its damage
// is none.
func TestTheNaiveBaselineWritesItemsTheLedgerReads(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	x := NewNaiveExec(env.Client, env.Ledger)
	assertLedger(t, env, sendAll(t, x))
	notes, err := x.Damage(context.Background(), decimal.NewFromInt(1))
	if err != nil || len(notes) != 1 || !strings.Contains(notes[0], "0 overdrafts") || !strings.Contains(notes[0], "0 lost updates") {
		t.Errorf("damage = %q, %v; want none", notes, err)
	}
}

// The direct baseline commits the write path's own transaction: the store
// reads what it wrote.
func TestTheDirectBaselineCommitsTheWritePathsTransaction(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	assertLedger(t, env, sendAll(t, NewDirectExec(env.Client, env.Ledger)))
}
