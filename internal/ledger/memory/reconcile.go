package memory

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/history"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/reconcile"
)

// Reconciler reconciles a Store with its History. For each user, in order,
// it audits the user's partition (ledger.Audit, as every reconciliation
// does) and compares the history with its entries (history.Compare); across
// users, the sum of the entries must be the sum of the balances, and the
// sum of their pending changes the sum of what the accounts have pending,
// as in package reconcile. With
// RepairProjection it rebuilds a history that disagrees. It reports
// progress after each user.
//
// The DynamoDB reconciliation (package reconcile: the lease, the rate, the
// grace of a projection behind, liability, breakage and pending by month,
// each budget's books, proposed adjustments) is tested in package reconcile against the emulator; this
// one serves the API's tests of the Reconcile stream, over the memory store.
type Reconciler struct {
	store   *Store
	history *History
}

// NewReconciler returns a Reconciler of s and h.
func NewReconciler(s *Store, h *History) *Reconciler { return &Reconciler{store: s, history: h} }

// Run reconciles o.User, or every user with entries; of o it heeds User,
// RepairProjection, SweepGrace and Progress.
func (r *Reconciler) Run(ctx context.Context, o reconcile.Options) (reconcile.Report, error) {
	start := r.store.now()
	if o.SweepGrace <= 0 {
		o.SweepGrace = reconcile.DefaultSweepGrace
	}
	users := []string{o.User}
	if o.User == "" {
		users = r.store.Users()
	} else if err := ledger.ValidateUserID(o.User); err != nil {
		return reconcile.Report{}, err
	}
	rep := reconcile.Report{StartTime: start.UTC(), User: o.User, Findings: []ledger.Finding{}}
	var total int64
	if o.User == "" {
		total = int64(len(users))
	}
	sumEntries, sumBalances := decimal.Zero, decimal.Zero
	sumPendingChanges, sumPending := decimal.Zero, decimal.Zero
	for _, user := range users {
		if err := ctx.Err(); err != nil {
			return reconcile.Report{}, err
		}
		p, err := r.store.Partition(ctx, user)
		if err != nil {
			return reconcile.Report{}, err
		}
		folded, findings := ledger.Audit(p, start.Add(-o.SweepGrace))
		projected, err := r.projection(ctx, user, p.Entries, o.RepairProjection)
		if err != nil {
			return reconcile.Report{}, err
		}
		rep.Findings = append(append(rep.Findings, findings...), projected...)
		rep.Users++
		rep.Entries += int64(len(p.Entries))
		rep.ItemsRead += int64(p.Items)
		sumEntries, sumBalances = sumEntries.Add(folded.Balance), sumBalances.Add(p.Account.Balance)
		sumPendingChanges, sumPending = sumPendingChanges.Add(folded.Pending), sumPending.Add(p.Account.Pending)
		if o.Progress != nil {
			o.Progress(reconcile.Progress{Users: rep.Users, TotalUsers: total, Entries: rep.Entries, Findings: int64(len(rep.Findings)), Elapsed: r.store.now().Sub(start)})
		}
	}
	rep.SumOfEntries, rep.SumOfBalances = sumEntries.String(), sumBalances.String()
	rep.SumOfPendingChanges, rep.SumOfPending = sumPendingChanges.String(), sumPending.String()
	if !sumEntries.Equal(sumBalances) {
		rep.Findings = append(rep.Findings, ledger.Finding{Kind: ledger.FindingSumMismatch, Expected: rep.SumOfEntries, Found: rep.SumOfBalances})
	}
	if !sumPendingChanges.Equal(sumPending) {
		rep.Findings = append(rep.Findings, ledger.Finding{Kind: ledger.FindingSumMismatch, Expected: "pending " + rep.SumOfPendingChanges, Found: "pending " + rep.SumOfPending})
	}
	slices.SortStableFunc(rep.Findings, func(a, b ledger.Finding) int {
		return strings.Compare(a.UserID+"\x00"+a.Kind, b.UserID+"\x00"+b.Kind)
	})
	rep.DurationMS = r.store.now().Sub(start).Milliseconds()
	rep.Clean = rep.Unrepaired() == 0
	return rep, nil
}

// projection compares a user's history with the ledger's entries and, with
// repair, rebuilds one that disagrees: its findings are then repaired if
// the rebuilt history agrees.
func (r *Reconciler) projection(ctx context.Context, user string, entries []ledger.Entry, repair bool) ([]ledger.Finding, error) {
	found, err := r.compareHistory(ctx, user, entries)
	if err != nil || len(found) == 0 || !repair {
		return found, err
	}
	if err := r.history.Rebuild(ctx, user); err != nil {
		return nil, fmt.Errorf("repair projection of %q: %w", user, err)
	}
	after, err := r.compareHistory(ctx, user, entries)
	if err != nil {
		return nil, err
	}
	for i := range found {
		found[i].Repaired = len(after) == 0
	}
	return append(found, after...), nil
}

// compareHistory compares a user's history with the ledger's entries
// (history.Compare): a history that does not trail the store has them all.
func (r *Reconciler) compareHistory(ctx context.Context, user string, entries []ledger.Entry) ([]ledger.Finding, error) {
	st, err := r.history.State(ctx, user)
	if err != nil {
		return nil, err
	}
	items, err := r.history.Items(ctx, user)
	if err != nil {
		return nil, err
	}
	return history.Compare(user, entries, st, items), nil
}
