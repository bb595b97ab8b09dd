// Package memory is a ledger store in memory, for fast tests of what is
// built on a ledger. It decides with ledger.Decide, as every store must, and
// passes the same contract suite as the DynamoDB store
// (ledgertest.Contract); it keeps nothing across a restart. Beside it are a
// history projection that follows it (History) and leases (Leases), so that
// package reconcile runs over them and the API can be tested without
// DynamoDB.
package memory

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/pagetoken"
)

// Store is an in-memory ledger store. One lock serialises every mutation,
// which is what a store's conditions achieve for one user.
type Store struct {
	mu         sync.Mutex
	users      map[string]*user
	now        func() time.Time
	maxBuckets int
	maxHolds   int
	maxPending int
	tokens     *pagetoken.Codec
	followers  []func(ledger.Entry)
	budgets    map[string]*budget // budget.go
	kinds      map[string]*kind   // kind.go
	maxKinds   int
}

var _ ledger.Store = (*Store)(nil)

type user struct {
	acct     ledger.Account
	entries  []ledger.Entry
	requests map[string]record
	holds    map[string]ledger.Hold // every hold, by request_id, as it is now
	// snapshots of the account, as the DynamoDB store writes them: one
	// each time it passes a multiple of ledger.SnapshotEvery, oldest first.
	snapshots []ledger.Account
}

// record is a request_id's idempotency record: the request's hash, what
// it asked for and what it did (its entry's version, or its refusal).
type record struct {
	hash string
	ledger.RequestRecord
}

func newRecord(m ledger.Mutation, version int64, refusal *ledger.Error) record {
	return record{hash: m.Hash(), RequestRecord: ledger.RequestRecord{Type: m.Type, Amount: m.Amount, Version: version, Last: version, Refusal: refusal}}
}

// New returns an empty store; now is its clock (nil: time.Now).
func New(now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{users: map[string]*user{}, now: now, tokens: pagetoken.Derived("memory")}
}

// SetLimits bounds each account's buckets and open holds as the store's
// settings do (0: the domain's defaults). Call it before the store is used.
func (s *Store) SetLimits(maxBuckets, maxHolds int) {
	s.maxBuckets, s.maxHolds = maxBuckets, maxHolds
}

// SetMaxPending bounds each account's pending grants as the store's
// settings do (0: the domain's default). Call it before the store is used.
func (s *Store) SetMaxPending(n int) { s.maxPending = n }

// Follow has f told of every entry the store commits from now on, in
// version order for each user, under the store's lock: f must not call the
// store.
func (s *Store) Follow(f func(ledger.Entry)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.followers = append(s.followers, f)
}

func (s *Store) user(id string) *user {
	u, ok := s.users[id]
	if !ok {
		u = &user{acct: ledger.Account{UserID: id}, requests: map[string]record{}, holds: map[string]ledger.Hold{}}
		s.users[id] = u
	}
	return u
}

func (s *Store) Apply(_ context.Context, m ledger.Mutation) (ledger.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.user(m.UserID)
	if rec, ok := u.requests[m.RequestID]; ok {
		return u.replay(m, rec)
	}
	facts := ledger.Facts{MaxBuckets: s.maxBuckets, MaxHolds: s.maxHolds, MaxPending: s.maxPending, Kinds: s.snapshot()}
	if h, ok := u.holds[m.HoldRequestID]; ok && m.HoldRequestID != "" {
		facts.Hold = &ledger.HoldRef{State: h.State}
	}
	if m.PurchaseRequestID != "" {
		if rec, ok := u.requests[m.PurchaseRequestID]; ok && rec.Refusal == nil {
			p := u.entries[rec.Version-1]
			facts.Purchase = &ledger.PurchaseRef{Version: p.Version, Type: p.Type, Amount: p.Amount.Abs(), Draws: p.Draws, Refunded: p.RefundedAmount}
		}
	}
	if m.GrantRequestID != "" {
		if rec, ok := u.requests[m.GrantRequestID]; ok && rec.Refusal == nil {
			g := u.entries[rec.Version-1]
			facts.Grant = &ledger.GrantRef{Version: g.Version, Type: g.Type, Amount: g.Amount.Add(g.PendingChange), Reversed: g.ReversedAmount, BudgetID: g.BudgetID, Kind: g.Kind}
		}
	}
	switch {
	case m.BudgetID != "":
		facts.Budget = s.budgetRef(u, m.BudgetID)
	case facts.Grant != nil && facts.Grant.BudgetID != "": // a reversal gives back to it
		facts.Budget = s.budgetRef(u, facts.Grant.BudgetID)
	}
	if m.ExplainBalance {
		for _, e := range u.entries {
			facts.EntriesSum = facts.EntriesSum.Add(e.Amount)
		}
	}
	dec, err := ledger.Decide(u.acct, m, s.now(), facts)
	if err != nil {
		if e, ok := ledger.AsError(err); ok && e.Kind.Final() {
			u.requests[m.RequestID] = newRecord(m, 0, e)
		}
		return ledger.Result{}, err
	}
	s.commit(u, dec)
	main := dec.Entry()
	s.draw(main)
	rec := newRecord(m, main.Version, nil)
	rec.Last = dec.After.Version // an expiration may follow its own entry
	u.requests[m.RequestID] = rec
	if facts.Purchase != nil {
		p := &u.entries[facts.Purchase.Version-1]
		p.RefundedAmount = p.RefundedAmount.Add(m.Amount)
	}
	if main.Type == ledger.EntryReversal {
		g := &u.entries[main.GrantVersion-1]
		g.ReversedAmount = g.ReversedAmount.Sub(main.Amount).Sub(main.PendingChange)
	}
	return ledger.Result{Entry: u.entries[main.Version-1], Balance: dec.After.Balance, Held: dec.After.Held, Pending: dec.After.Pending, Hold: dec.Hold}, nil
}

// commit appends a decision's entries, with ids, takes its account, and
// moves the holds its entries made or resolved, and tells the followers.
func (s *Store) commit(u *user, dec ledger.Decision) {
	for _, e := range dec.Entries {
		e.ID = ulid.Make().String()
		if e.Refundable() {
			e.RefundedAmount = decimal.Zero
		}
		if e.Type == ledger.EntryGrant {
			e.ReversedAmount = decimal.Zero
		}
		u.entries = append(u.entries, e)
		switch {
		case e.Type == ledger.EntryHold:
			u.holds[e.RequestID] = ledger.HoldOf(e)
		case e.HoldRequestID != "":
			u.holds[e.HoldRequestID] = ledger.ResolvedHold(u.holds[e.HoldRequestID], e)
		}
	}
	if ledger.SnapshotDue(u.acct.Version, dec.After.Version) {
		u.snapshots = append(u.snapshots, dec.After) // asof.go
	}
	u.acct = dec.After
	for _, e := range u.entries[len(u.entries)-len(dec.Entries):] {
		for _, f := range s.followers {
			f(e)
		}
	}
}

func (u *user) replay(m ledger.Mutation, rec record) (ledger.Result, error) {
	if rec.hash != m.Hash() {
		return ledger.Result{}, ledger.Errorf(ledger.KindAlreadyExists, ledger.ReasonRequestIDReused,
			"request_id %q of user %q was used for another request", m.RequestID, m.UserID)
	}
	if rec.Refusal != nil {
		again := *rec.Refusal
		again.Replayed = true
		return ledger.Result{}, &again
	}
	e, last := u.entries[rec.Version-1], u.entries[rec.Last-1]
	hold := u.holds[cmp.Or(e.HoldRequestID, e.RequestID)]
	return ledger.Result{Entry: e, Balance: last.BalanceAfter, Held: last.HeldAfter, Pending: last.PendingAfter, Replayed: true, Hold: hold}, nil
}

// Holds pages through a user's holds in version order.
func (s *Store) Holds(_ context.Context, id string, q ledger.HoldQuery) ([]ledger.Hold, string, error) {
	return pagetoken.List(s.tokens, id, q, func(q ledger.HoldQuery, w pagetoken.Window) ([]ledger.Hold, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		u, ok := s.users[id]
		if !ok {
			return nil, nil
		}
		now := s.now()
		var out []ledger.Hold
		for _, h := range slices.SortedFunc(maps.Values(u.holds), func(a, b ledger.Hold) int { return cmp.Compare(a.Version, b.Version) }) {
			if len(out) == w.Limit {
				break
			}
			if h.Version > w.After && q.Matches(h, now) {
				out = append(out, h)
			}
		}
		return out, nil
	})
}

// Partition reads all the store keeps of user, for ledger.Audit.
func (s *Store) Partition(_ context.Context, id string) (ledger.Partition, error) {
	if err := ledger.ValidateUserID(id); err != nil {
		return ledger.Partition{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := ledger.Partition{Account: ledger.NewAccount(id), Requests: map[string]ledger.RequestRecord{}, Kinds: s.snapshot()}
	u, ok := s.users[id]
	if !ok {
		return p, nil
	}
	if u.acct.Version > 0 {
		p.Account = u.acct
	}
	p.Entries = slices.Clone(u.entries)
	for id, r := range u.requests {
		p.Requests[id] = r.RequestRecord
	}
	p.Holds = slices.SortedFunc(maps.Values(u.holds), func(a, b ledger.Hold) int { return cmp.Compare(a.Version, b.Version) })
	p.Items = 1 + len(p.Entries) + len(p.Requests) + len(p.Holds)
	return p, nil
}

func (s *Store) Balance(_ context.Context, id string) (ledger.Account, error) {
	if err := ledger.ValidateUserID(id); err != nil {
		return ledger.Account{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if u, ok := s.users[id]; ok && u.acct.Version > 0 {
		return u.acct, nil
	}
	return ledger.Account{UserID: id, Status: ledger.StatusActive}, nil
}

func (s *Store) EntriesAfter(_ context.Context, id string, after int64, limit int) ([]ledger.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.users[id]
	if !ok || after >= int64(len(u.entries)) || limit <= 0 {
		return nil, nil
	}
	es := u.entries[max(after, 0):]
	return slices.Clone(es[:min(len(es), limit)]), nil
}

// Entries returns a page of user's entries in version order, as q asks for
// it, and the next page's token ("" on the last page): ListEntries, paged
// as every store pages (pagetoken.List).
func (s *Store) Entries(ctx context.Context, user string, q ledger.EntryQuery) ([]ledger.Entry, string, error) {
	return pagetoken.List(s.tokens, user, q, func(_ ledger.EntryQuery, w pagetoken.Window) ([]ledger.Entry, error) {
		return s.EntriesAfter(ctx, user, w.After, w.Limit)
	})
}

// Users calls fn with each user with entries, in order, one after
// another, for reconciliation (reconcile.Store); segments and scanned
// are the DynamoDB scan's, which a store in memory does without.
func (s *Store) Users(ctx context.Context, _ int, _ func(int), fn func(user string) error) error {
	for _, u := range s.UserIDs() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(u); err != nil {
			return err
		}
	}
	return nil
}

// CountAccounts counts the users with entries (reconcile.Store).
func (s *Store) CountAccounts(context.Context, func(int)) (int64, error) {
	return int64(len(s.UserIDs())), nil
}

// UserIDs returns the users with entries, in order.
func (s *Store) UserIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, u := range s.users {
		if u.acct.Version > 0 {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

func (s *Store) Expire(_ context.Context, id string) (ledger.Result, error) {
	if err := ledger.ValidateUserID(id); err != nil {
		return ledger.Result{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.user(id)
	dec := ledger.DecideExpiry(u.acct, s.now())
	if len(dec.Entries) == 0 {
		return ledger.Result{Balance: u.acct.Balance, Held: u.acct.Held, Pending: u.acct.Pending}, nil
	}
	s.commit(u, dec)
	last := u.entries[len(u.entries)-1]
	return ledger.Result{Entry: last, Balance: last.BalanceAfter, Held: last.HeldAfter, Pending: last.PendingAfter}, nil
}

func (s *Store) SetStatus(_ context.Context, id string, status ledger.Status, reason string) (ledger.Account, bool, error) {
	if err := ledger.CheckStatusChange(id, status, reason); err != nil {
		return ledger.Account{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.users[id]
	if !ok || u.acct.Version == 0 {
		return ledger.Account{}, false, ledger.Errorf(ledger.KindNotFound, ledger.ReasonAccountNotFound, "user %q has no account", id)
	}
	changed := u.acct.Status != status
	u.acct.Status = status
	return u.acct, changed, nil
}
