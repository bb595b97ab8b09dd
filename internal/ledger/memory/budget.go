package memory

import (
	"context"
	"slices"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
)

var _ ledger.Budgets = (*Store)(nil)

// budget is a budget in memory: one remaining, whatever its shards (the
// store's one lock does what the shards' conditions do in DynamoDB), and
// the hashes of the requests that created and topped it up.
type budget struct {
	ledger.Budget
	requests map[string]string // request_id -> hash
}

// budgetRef is budget id as a mutation of u is decided on, for
// ledger.Facts; nil if there is none. Called under s.mu.
func (s *Store) budgetRef(u *user, id string) *ledger.BudgetRef {
	b, ok := s.budgets[id]
	if !ok {
		return nil
	}
	return &ledger.BudgetRef{Status: b.Status, Remaining: b.Remaining, UserNet: ledger.BudgetNet(u.entries, id)}
}

// draw takes a committed grant's amount from its budget (a pending
// grant's too), or gives a give-back's back: a debit adjustment's or a
// reversal's (ledger.Entry.BudgetAmount, negative). Called under s.mu.
func (s *Store) draw(e ledger.Entry) {
	if b, ok := s.budgets[e.BudgetID]; ok && e.BudgetID != "" {
		a := e.BudgetAmount()
		b.Granted, b.Remaining = b.Granted.Add(a), b.Remaining.Sub(a)
	}
}

func (s *Store) CreateBudget(_ context.Context, c ledger.BudgetCreation) (ledger.Budget, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.budgets == nil {
		s.budgets = map[string]*budget{}
	}
	if b, ok := s.budgets[c.BudgetID]; ok {
		if hash, seen := b.requests[c.RequestID]; seen {
			return b.replay(c.RequestID, hash, c.Hash())
		}
		return ledger.Budget{}, false, ledger.Errorf(ledger.KindAlreadyExists, ledger.ReasonBudgetExists, "budget %q exists already", c.BudgetID)
	}
	b := &budget{
		Budget: ledger.Budget{ID: c.BudgetID, Total: c.Amount, Granted: decimal.Zero, Remaining: c.Amount, Status: ledger.BudgetOpen,
			Description: c.Description, CreateTime: s.now().UTC(), Shards: c.Shards},
		requests: map[string]string{c.RequestID: c.Hash()},
	}
	s.budgets[c.BudgetID] = b
	return b.Budget, false, nil
}

func (s *Store) TopUpBudget(_ context.Context, u ledger.BudgetTopUp) (ledger.Budget, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.budgets[u.BudgetID]
	if !ok {
		return ledger.Budget{}, false, ledger.BudgetNotFound(u.BudgetID)
	}
	if hash, seen := b.requests[u.RequestID]; seen {
		return b.replay(u.RequestID, hash, u.Hash())
	}
	if b.Status != ledger.BudgetOpen {
		return ledger.Budget{}, false, ledger.BudgetIsClosed(u.BudgetID, "budget %q is closed: it takes no top-up", u.BudgetID)
	}
	b.Total, b.Remaining = b.Total.Add(u.Amount), b.Remaining.Add(u.Amount)
	b.requests[u.RequestID] = u.Hash()
	return b.Budget, false, nil
}

func (b *budget) replay(requestID, was, hash string) (ledger.Budget, bool, error) {
	if was != hash {
		return ledger.Budget{}, false, ledger.Errorf(ledger.KindAlreadyExists, ledger.ReasonRequestIDReused,
			"request_id %q of budget %q was used for another request", requestID, b.ID)
	}
	return b.Budget, true, nil
}

func (s *Store) CloseBudget(_ context.Context, id string) (ledger.Budget, bool, error) {
	if err := ledger.ValidateBudgetID(id); err != nil {
		return ledger.Budget{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.budgets[id]
	if !ok {
		return ledger.Budget{}, false, ledger.BudgetNotFound(id)
	}
	was := b.Status
	b.Status = ledger.BudgetClosed
	return b.Budget, was == ledger.BudgetClosed, nil
}

func (s *Store) Budget(_ context.Context, id string) (ledger.Budget, error) {
	if err := ledger.ValidateBudgetID(id); err != nil {
		return ledger.Budget{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.budgets[id]
	if !ok {
		return ledger.Budget{}, ledger.BudgetNotFound(id)
	}
	return b.Budget, nil
}

// ListBudgets pages through the budgets by id; the token is the position
// in that order, as the DynamoDB store's.
func (s *Store) ListBudgets(_ context.Context, q ledger.BudgetQuery) ([]ledger.Budget, string, error) {
	q, err := q.Check()
	if err != nil {
		return nil, "", err
	}
	var offset int64
	if q.PageToken != "" {
		if offset, err = s.tokens.Decode(q.PageToken, "budgets"); err != nil {
			return nil, "", err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.budgets))
	for id := range s.budgets {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	ids = ids[min(int(offset), len(ids)):]
	next := ""
	if len(ids) > q.PageSize {
		ids, next = ids[:q.PageSize], s.tokens.Encode(offset+int64(q.PageSize), "budgets")
	}
	out := make([]ledger.Budget, len(ids))
	for i, id := range ids {
		out[i] = s.budgets[id].Budget
	}
	return out, next, nil
}
