// Package memory is a ledger store in memory, for fast tests of what is
// built on a ledger. It decides with ledger.Decide, as every store must, and
// passes the same contract suite as the DynamoDB store
// (ledgertest.Contract); it keeps nothing across a restart.
package memory

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
)

// Store is an in-memory ledger store. One lock serialises every mutation,
// which is what a store's conditions achieve for one user.
type Store struct {
	mu         sync.Mutex
	users      map[string]*user
	now        func() time.Time
	maxBuckets int
	maxHolds   int
}

var _ ledger.Store = (*Store)(nil)

type user struct {
	acct     ledger.Account
	entries  []ledger.Entry
	requests map[string]record
	holds    map[string]ledger.Hold // every hold, by request_id, as it is now
}

// record is a request_id's idempotency record.
type record struct {
	hash    string
	version int64         // of its entry; 0 for a refusal
	refusal *ledger.Error // the refusal it got
}

// New returns an empty store; now is its clock (nil: time.Now).
func New(now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{users: map[string]*user{}, now: now}
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
	facts := ledger.Facts{MaxBuckets: s.maxBuckets, MaxHolds: s.maxHolds}
	if h, ok := u.holds[m.HoldRequestID]; ok && m.HoldRequestID != "" {
		facts.Hold = &ledger.HoldRef{State: h.State}
	}
	if m.PurchaseRequestID != "" {
		if rec, ok := u.requests[m.PurchaseRequestID]; ok && rec.refusal == nil {
			p := u.entries[rec.version-1]
			facts.Purchase = &ledger.PurchaseRef{Version: p.Version, Type: p.Type, Amount: p.Amount.Abs(), Draws: p.Draws, Refunded: p.RefundedAmount}
		}
	}
	if m.ExplainBalance {
		for _, e := range u.entries {
			facts.EntriesSum = facts.EntriesSum.Add(e.Amount)
		}
	}
	dec, err := ledger.Decide(u.acct, m, s.now(), facts)
	if err != nil {
		if e, ok := ledger.AsError(err); ok && e.Kind.Final() {
			u.requests[m.RequestID] = record{hash: m.Hash(), refusal: e}
		}
		return ledger.Result{}, err
	}
	u.commit(dec)
	main := dec.Entry()
	u.requests[m.RequestID] = record{hash: m.Hash(), version: main.Version}
	if facts.Purchase != nil {
		p := &u.entries[facts.Purchase.Version-1]
		p.RefundedAmount = p.RefundedAmount.Add(m.Amount)
	}
	return ledger.Result{Entry: u.entries[main.Version-1], Balance: main.BalanceAfter, Hold: dec.Hold}, nil
}

// commit appends a decision's entries, with ids, takes its account, and
// moves the holds its entries made or resolved.
func (u *user) commit(dec ledger.Decision) {
	for _, e := range dec.Entries {
		e.ID = ulid.Make().String()
		if e.Refundable() {
			e.RefundedAmount = decimal.Zero
		}
		u.entries = append(u.entries, e)
		switch {
		case e.Type == ledger.EntryHold:
			u.holds[e.RequestID] = ledger.HoldOf(e)
		case e.HoldRequestID != "":
			u.holds[e.HoldRequestID] = ledger.ResolvedHold(u.holds[e.HoldRequestID], e)
		}
	}
	u.acct = dec.After
}

func (u *user) replay(m ledger.Mutation, rec record) (ledger.Result, error) {
	if rec.hash != m.Hash() {
		return ledger.Result{}, ledger.Errorf(ledger.KindAlreadyExists, ledger.ReasonRequestIDReused,
			"request_id %q of user %q was used for another request", m.RequestID, m.UserID)
	}
	if rec.refusal != nil {
		again := *rec.refusal
		again.Replayed = true
		return ledger.Result{}, &again
	}
	e := u.entries[rec.version-1]
	hold := u.holds[cmp.Or(e.HoldRequestID, e.RequestID)]
	return ledger.Result{Entry: e, Balance: e.BalanceAfter, Replayed: true, Hold: hold}, nil
}

// Holds pages through a user's holds in version order. A page token is the
// version of the last hold of the page before.
func (s *Store) Holds(_ context.Context, id string, q ledger.HoldQuery) ([]ledger.Hold, string, error) {
	if err := ledger.ValidateUserID(id); err != nil {
		return nil, "", err
	}
	q, err := q.Check()
	if err != nil {
		return nil, "", err
	}
	var after int64
	if q.PageToken != "" {
		if after, err = strconv.ParseInt(q.PageToken, 10, 64); err != nil || after < 1 {
			return nil, "", ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidPageToken, "page_token is not one this store gave")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.users[id]
	if !ok {
		return nil, "", nil
	}
	now := s.now()
	var out []ledger.Hold
	for _, h := range slices.SortedFunc(maps.Values(u.holds), func(a, b ledger.Hold) int { return cmp.Compare(a.Version, b.Version) }) {
		if h.Version > after && q.Matches(h, now) {
			out = append(out, h)
		}
	}
	if len(out) <= q.PageSize {
		return out, "", nil
	}
	out = out[:q.PageSize]
	return out, strconv.FormatInt(out[len(out)-1].Version, 10), nil
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

func (s *Store) Expire(_ context.Context, id string) (ledger.Result, error) {
	if err := ledger.ValidateUserID(id); err != nil {
		return ledger.Result{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.user(id)
	dec := ledger.DecideExpiry(u.acct, s.now())
	if len(dec.Entries) == 0 {
		return ledger.Result{Balance: u.acct.Balance}, nil
	}
	u.commit(dec)
	last := u.entries[len(u.entries)-1]
	return ledger.Result{Entry: last, Balance: last.BalanceAfter}, nil
}

func (s *Store) SetStatus(_ context.Context, id string, status ledger.Status, _ string) (ledger.Account, bool, error) {
	if err := ledger.ValidateUserID(id); err != nil {
		return ledger.Account{}, false, err
	}
	if status != ledger.StatusActive && status != ledger.StatusFrozen {
		return ledger.Account{}, false, ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidStatus, "status must be ACTIVE or FROZEN")
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
