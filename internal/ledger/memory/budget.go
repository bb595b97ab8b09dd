package memory

import (
	"context"
	"slices"

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
// grant's too), or gives a give-back's back (ledger.Budget.Draw). Called
// under s.mu.
func (s *Store) draw(e ledger.Entry) {
	if b, ok := s.budgets[e.BudgetID]; ok && e.BudgetID != "" {
		b.Budget = b.Draw(e)
	}
}

// budgetFacts is what the store holds of budget id for a call under
// requestID: the budget (nil: none) and the hash recorded under the
// request ("": none). Called under s.mu.
func (s *Store) budgetFacts(id, requestID string) (*budget, *ledger.Budget, string) {
	b, ok := s.budgets[id]
	if !ok {
		return nil, nil, ""
	}
	return b, &b.Budget, b.requests[requestID]
}

func (s *Store) CreateBudget(_ context.Context, c ledger.BudgetCreation) (ledger.Budget, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, cur, recorded := s.budgetFacts(c.BudgetID, c.RequestID)
	b, replayed, err := ledger.DecideBudgetCreation(c, cur, recorded, s.now())
	if err != nil || replayed {
		return b, replayed, err
	}
	if s.budgets == nil {
		s.budgets = map[string]*budget{}
	}
	s.budgets[c.BudgetID] = &budget{Budget: b, requests: map[string]string{c.RequestID: c.Hash()}}
	return b, false, nil
}

func (s *Store) TopUpBudget(_ context.Context, u ledger.BudgetTopUp) (ledger.Budget, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept, cur, recorded := s.budgetFacts(u.BudgetID, u.RequestID)
	b, replayed, err := ledger.DecideBudgetTopUp(u, cur, recorded)
	if err != nil || replayed {
		return b, replayed, err
	}
	kept.Budget = b
	kept.requests[u.RequestID] = u.Hash()
	return b, false, nil
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
	var replayed bool
	b.Budget, replayed = ledger.DecideBudgetClose(b.Budget)
	return b.Budget, replayed, nil
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

// ListBudgets pages through the budgets by id, from the id after the last
// of the page before, which the token holds (a key token), as the
// DynamoDB store's.
func (s *Store) ListBudgets(_ context.Context, q ledger.BudgetQuery) ([]ledger.Budget, string, error) {
	q, err := q.Check()
	if err != nil {
		return nil, "", err
	}
	var after string
	if q.PageToken != "" {
		if after, err = s.tokens.DecodeKey(q.PageToken, "budgets"); err != nil {
			return nil, "", err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.budgets))
	for id := range s.budgets {
		if q.PageToken == "" || id > after {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	next := ""
	if len(ids) > q.PageSize {
		ids = ids[:q.PageSize]
		next = s.tokens.EncodeKey(ids[len(ids)-1], "budgets")
	}
	out := make([]ledger.Budget, len(ids))
	for i, id := range ids {
		out[i] = s.budgets[id].Budget
	}
	return out, next, nil
}
