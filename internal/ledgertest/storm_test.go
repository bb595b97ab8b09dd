package ledgertest_test

import (
	"context"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/memory"
	"github.com/pointledger/pointledger/internal/ledgertest"
)

// StormWithReturns writes what its callers rely on: pending grants,
// maturations and reversals among the other entries, a ledger that audits
// clean, and books that hold each user's balance plus pending. On the
// memory store, which passes the contract as every store does.
func TestStormWithReturnsWritesPendingGrantsAndReversals(t *testing.T) {
	t.Parallel()
	s := memory.New(time.Now)
	users := ledgertest.Users("u", 5)
	books := ledgertest.StormWithReturns(t, s, users, 4, 400, 1)
	time.Sleep(ledgertest.ReturnWindow) // every pending grant is due now
	seen := map[ledger.EntryType]int{}
	pending := 0
	for _, u := range users {
		if _, err := s.Expire(context.Background(), u); err != nil { // what the sweeper does
			t.Fatal(err)
		}
		acct := ledgertest.Sound(t, s, u)
		if got := acct.Balance.Add(acct.Pending); !got.Equal(books.Balances[u]) {
			t.Errorf("%s: balance %s + pending %s, the books say %s", u, acct.Balance, acct.Pending, books.Balances[u])
		}
		if !acct.Pending.IsZero() {
			t.Errorf("%s: %s still pending after its return windows", u, acct.Pending)
		}
		entries, err := s.EntriesAfter(context.Background(), u, 0, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			seen[e.Type]++
			if e.Type == ledger.EntryGrant && e.PendingChange.IsPositive() {
				pending++
			}
		}
	}
	if pending == 0 || seen[ledger.EntryMaturation] == 0 || seen[ledger.EntryReversal] == 0 || seen[ledger.EntryRefund] == 0 {
		t.Errorf("%d pending grants, entries by type %v: want pending grants, maturations, reversals and refunds", pending, seen)
	}
	if books.Refused == 0 {
		t.Errorf("no refusal among %d requests: the storm asks for nothing a ledger refuses", books.Acknowledged)
	}
}
