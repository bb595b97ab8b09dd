package memory

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/projection"
	"github.com/pointledger/pointledger/internal/reconcile"
)

// Reconciler reconciles a Store with its History. For each user, in order,
// it folds the entries (ledger.CheckFold: versions 1..N, and the account has
// the fold's version, balance and buckets) and compares the history with
// them (the state is their projection.State, each item is its entry, a
// purchase carrying the refunds after it); across users, the sum of the
// entries must be the sum of the balances. With RepairProjection it
// rebuilds a history that disagrees. It reports progress after each user.
//
// The DynamoDB reconciliation (package reconcile: audits of request records
// and refund caps, the lease, the rate, liability and breakage, proposed
// adjustments) is tested in package reconcile against the emulator; this one
// serves the API's tests of the Reconcile stream, over the memory store.
type Reconciler struct {
	store   *Store
	history *History
}

// NewReconciler returns a Reconciler of s and h.
func NewReconciler(s *Store, h *History) *Reconciler { return &Reconciler{store: s, history: h} }

// Run reconciles o.User, or every user with entries; of o it heeds User,
// RepairProjection and Progress.
func (r *Reconciler) Run(ctx context.Context, o reconcile.Options) (reconcile.Report, error) {
	start := r.store.now()
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
	for _, user := range users {
		if err := ctx.Err(); err != nil {
			return reconcile.Report{}, err
		}
		acct, err := r.store.Balance(ctx, user)
		if err != nil {
			return reconcile.Report{}, err
		}
		entries, err := r.store.EntriesAfter(ctx, user, 0, math.MaxInt)
		if err != nil {
			return reconcile.Report{}, err
		}
		folded, findings := ledger.CheckFold(acct, entries)
		history, err := r.compareHistory(ctx, user, entries)
		if err != nil {
			return reconcile.Report{}, err
		}
		if len(history) > 0 && o.RepairProjection {
			if err := r.history.Rebuild(ctx, user); err != nil {
				return reconcile.Report{}, fmt.Errorf("repair projection of %q: %w", user, err)
			}
			after, err := r.compareHistory(ctx, user, entries)
			if err != nil {
				return reconcile.Report{}, err
			}
			for i := range history {
				history[i].Repaired = len(after) == 0
			}
			history = append(history, after...)
		}
		rep.Findings = append(append(rep.Findings, findings...), history...)
		rep.Users++
		rep.Entries += int64(len(entries))
		rep.ItemsRead += int64(len(entries)) + 1
		sumEntries, sumBalances = sumEntries.Add(folded.Balance), sumBalances.Add(acct.Balance)
		if o.Progress != nil {
			o.Progress(reconcile.Progress{Users: rep.Users, TotalUsers: total, Entries: rep.Entries, Findings: int64(len(rep.Findings)), Elapsed: r.store.now().Sub(start)})
		}
	}
	rep.SumOfEntries, rep.SumOfBalances = sumEntries.String(), sumBalances.String()
	if !sumEntries.Equal(sumBalances) {
		rep.Findings = append(rep.Findings, ledger.Finding{Kind: ledger.FindingSumMismatch, Expected: rep.SumOfEntries, Found: rep.SumOfBalances})
	}
	slices.SortStableFunc(rep.Findings, func(a, b ledger.Finding) int {
		return strings.Compare(a.UserID+"\x00"+a.Kind, b.UserID+"\x00"+b.Kind)
	})
	rep.DurationMS = r.store.now().Sub(start).Milliseconds()
	rep.Clean = rep.Unrepaired() == 0
	return rep, nil
}

// compareHistory compares a user's history with the ledger's entries: the
// state must be their fold, and the items the entries, a purchase's refunded
// amount the sum of its refunds.
func (r *Reconciler) compareHistory(ctx context.Context, user string, entries []ledger.Entry) ([]ledger.Finding, error) {
	st, err := r.history.State(ctx, user)
	if err != nil {
		return nil, err
	}
	items, err := r.history.Items(ctx, user)
	if err != nil {
		return nil, err
	}
	var out []ledger.Finding
	add := func(kind string, expected, found any, versions ...int64) {
		out = append(out, ledger.Finding{UserID: user, Kind: kind, Expected: fmt.Sprint(expected), Found: fmt.Sprint(found), Versions: versions})
	}
	want := projection.State{UserID: user}
	var missing []int64
	for i, e := range entries {
		want = want.Add(e)
		if i >= len(items) {
			missing = append(missing, e.Version)
			continue
		}
		if got, expected := fmt.Sprintf("%+v", items[i]), fmt.Sprintf("%+v", e); got != expected {
			add(ledger.FindingProjectionMismatch, expected, got, e.Version)
		}
	}
	if len(missing) > 0 {
		add(ledger.FindingProjectionMissing, fmt.Sprintf("%d entries", len(missing)), "none", missing...)
	}
	for _, it := range items[min(len(items), len(entries)):] {
		add(ledger.FindingProjectionExtra, "no entry", fmt.Sprintf("%+v", it), it.Version)
	}
	if st.Version != want.Version || !st.Balance.Equal(want.Balance) || !st.Equal(want.Totals) {
		add(ledger.FindingProjectionState, fmt.Sprintf("version %d balance %s %s", want.Version, want.Balance, want.Totals),
			fmt.Sprintf("version %d balance %s %s", st.Version, st.Balance, st.Totals), st.Version)
	}
	return out, nil
}
