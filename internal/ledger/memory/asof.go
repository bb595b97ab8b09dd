package memory

import (
	"context"
	"sort"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/pagetoken"
)

// AccountAt is the account of user as its entries recorded it at t, as
// the DynamoDB store reads it: the latest snapshot at or before t, and
// the entries after it written by then (ledger.AccountAsOf).
func (s *Store) AccountAt(_ context.Context, id string, t time.Time) (ledger.Account, error) {
	if err := ledger.ValidateUserID(id); err != nil {
		return ledger.Account{}, err
	}
	t = ledger.Instant(t)
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.users[id]
	if !ok {
		return ledger.AccountAsOf(id, ledger.Account{}, nil, t)
	}
	var base ledger.Account
	// Snapshots are in version order, so in time order too.
	if i := sort.Search(len(u.snapshots), func(i int) bool { return u.snapshots[i].UpdateTime.After(t) }); i > 0 {
		base = u.snapshots[i-1]
	}
	return ledger.AccountAsOf(id, base, u.entries[base.Version:], t)
}

// Statement is a page of user's statement as q asks for it, paged as
// every list is (pagetoken.List), and the next page's token.
func (s *Store) Statement(ctx context.Context, user string, q ledger.StatementQuery) (ledger.Statement, string, error) {
	var st ledger.Statement
	page, next, err := pagetoken.List(s.tokens, user, q, func(q ledger.StatementQuery, w pagetoken.Window) ([]ledger.Entry, error) {
		var err error
		st, err = ledger.ReadStatement(ctx, s, user, q)
		return st.Page(w.After, w.Limit), err
	})
	st.Entries = page
	return st, next, err
}
