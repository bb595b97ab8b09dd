// Package reconcile proves that the books balance: for every user, the
// account is the fold of its entries and the ledger's other invariants hold
// (ledger.Audit of the partition the store reads), and the history
// projection has exactly the ledger's entries (history.Compare); across all users, the sum of the entries equals the sum of the
// balances, and the sum of their pending changes the sum of what the
// accounts have pending.
//
// Reconciliation only reads, except for two repairs that never touch the
// ledger: with RepairProjection it rebuilds the history of users whose
// projection disagrees, and for a balance that disagrees with its entries it
// proposes the adjustment that would explain it (see ledger.Mutation), for
// an admin to apply. Only one reconciliation runs at a time: it holds a
// lease in the lease table while it runs.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/history"
	"github.com/pointledger/pointledger/internal/ledger"
)

// Store is what reconciliation reads of the ledger.
type Store interface {
	Partition(ctx context.Context, user string) (ledger.Partition, error)
	EntriesAfter(ctx context.Context, user string, after int64, limit int) ([]ledger.Entry, error)
	Users(ctx context.Context, segments int, scanned func(int), fn func(user string) error) error
	CountAccounts(ctx context.Context, scanned func(int)) (int64, error)
	// ListBudgets pages through the budgets, Budget reads one (budget.go).
	ListBudgets(ctx context.Context, q ledger.BudgetQuery) ([]ledger.Budget, string, error)
	Budget(ctx context.Context, id string) (ledger.Budget, error)
}

// History is what reconciliation reads and repairs of the projection.
type History interface {
	State(ctx context.Context, user string) (history.State, error)
	Items(ctx context.Context, user string) ([]ledger.Entry, error)
	Rebuild(ctx context.Context, user string) error
}

// Leases keeps reconciliations from overlapping: the lease table's Lock
// (projection.LeaseTable).
type Leases interface {
	// Lock takes key for owner and keeps it until unlock; lost is told if
	// it is lost meanwhile. While another owner holds key, its error has a
	// method HeldBy() (owner string, until time.Time).
	Lock(ctx context.Context, key, owner string, ttl time.Duration, lost func(error)) (unlock func(context.Context) error, err error)
}

// Options say what to reconcile and how fast.
type Options struct {
	User             string        // only this user; "" = all
	Segments         int           // parallel scan segments and workers; default 4
	Rate             int           // at most this many items read per second; 0 = no limit
	RepairProjection bool          // rebuild the history of users whose projection disagrees
	ProjectionGrace  time.Duration // how long a projection behind the ledger may take to catch up; default 5s
	SweepGrace       time.Duration // how long an expired bucket or hold, or a matured grant, may stay off the record; default DefaultSweepGrace
	Owner            string        // name in the lease table; default "reconcile-<time>"
	LeaseTTL         time.Duration // default 30s
	Progress         func(Progress)
	// AsOf: the liability, breakage and pending of the report as of this
	// time instead of the start (each user's entries written by then,
	// with what time decided by then); zero: the start. The checks are of
	// the ledger as it is.
	AsOf time.Time
}

// Progress is reported while a reconciliation runs.
type Progress struct {
	Users      int64 // checked so far
	TotalUsers int64 // accounts counted at the start (0 for one user)
	Entries    int64
	Findings   int64
	Elapsed    time.Duration
}

// Adjustment is an adjustment the report proposes to an admin: an entry
// that explains a balance its entries do not add up to.
type Adjustment struct {
	UserID          string `json:"user_id"`
	Amount          string `json:"amount"` // positive
	Debit           bool   `json:"debit"`
	ExplainBalance  bool   `json:"explain_balance"`
	ExpectedBalance string `json:"expected_balance"`
	Reason          string `json:"reason"`
	RequestID       string `json:"request_id"` // suggested; reusing it makes applying the proposal idempotent
}

// Report is the result. Its JSON form is stable: fields are only added.
type Report struct {
	StartTime     time.Time `json:"start_time"`
	DurationMS    int64     `json:"duration_ms"`
	User          string    `json:"user,omitempty"`
	Users         int64     `json:"users_checked"`
	Entries       int64     `json:"entries_checked"`
	ItemsRead     int64     `json:"items_read"`
	SumOfEntries  string    `json:"sum_of_entries"`
	SumOfBalances string    `json:"sum_of_balances"`
	// Points granted and not yet spendable: the entries' pending changes
	// folded, and what the accounts say they have pending.
	SumOfPendingChanges string           `json:"sum_of_pending_changes"`
	SumOfPending        string           `json:"sum_of_pending"`
	Findings            []ledger.Finding `json:"findings"`
	Proposed            []Adjustment     `json:"proposed_adjustments"`
	Clean               bool             `json:"clean"` // no finding is left unrepaired

	// Liability is the points outstanding by the month they expire in
	// ("never" last), as of the start (or AsOf); Breakage the points that expired
	// unused, by the month they expired in (EXPIRATION entries, and points
	// past their expiry not yet on the record). Only matured points count
	// in either: a pending grant's points whose effective time had come by
	// the start count, matured by time as a balance read counts them; the
	// others are in Pending, by the month they mature in. Months are UTC,
	// YYYY-MM. Each row is one month and one point kind (Kind).
	Liability []MonthAmount `json:"liability"`
	Breakage  []MonthAmount `json:"breakage"`
	Pending   []MonthAmount `json:"pending"`
	// AsOf is the time Liability, Breakage and Pending are of, when
	// Options.AsOf asked for one.
	AsOf time.Time `json:"as_of,omitzero"`

	// Budgets is every budget, with what the users' entries show of it
	// (budget.go); empty when one user is reconciled.
	Budgets []BudgetReport `json:"budgets"`
}

// MonthAmount is a sum of points of one kind in one month.
type MonthAmount struct {
	Month  string `json:"month"` // YYYY-MM, or "never"
	Amount string `json:"amount"`
	Kind   string `json:"kind"` // "standard" for standard points
}

// monthOf is t's month, or "never" for the zero time.
func monthOf(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format("2006-01")
}

// months sums amounts into months and kinds, in order of month ("never"
// last), then kind.
type months map[monthKind]decimal.Decimal

type monthKind struct{ month, kind string }

func (m months) add(t time.Time, kind string, amount decimal.Decimal) {
	k := monthKind{monthOf(t), ledger.KindName(kind)}
	m[k] = m[k].Add(amount)
}

func (m months) list() []MonthAmount {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b monthKind) int {
		switch {
		case a.month == b.month:
			return strings.Compare(a.kind, b.kind)
		case a.month == "never":
			return 1
		case b.month == "never":
			return -1
		}
		return strings.Compare(a.month, b.month)
	})
	out := make([]MonthAmount, 0, len(keys))
	for _, k := range keys {
		out = append(out, MonthAmount{Month: k.month, Amount: m[k].String(), Kind: k.kind})
	}
	return out
}

// Unrepaired counts the findings not repaired by this reconciliation.
func (r Report) Unrepaired() int {
	n := 0
	for _, f := range r.Findings {
		if !f.Repaired {
			n++
		}
	}
	return n
}

// Reconciler runs reconciliations.
type Reconciler struct {
	store   Store
	history History
	leases  Leases
	now     func() time.Time
}

// New returns a Reconciler; leases holds the lease that keeps reconciliations
// from overlapping.
func New(store Store, history History, leases Leases) *Reconciler {
	return &Reconciler{store: store, history: history, leases: leases, now: time.Now}
}

// SetClock sets the clock that says when a reconciliation starts, as of
// which it audits, and reports liability and breakage (nil: time.Now):
// the store's, for a store on a clock of its own (a memory store in tests).
func (r *Reconciler) SetClock(now func() time.Time) {
	if now == nil {
		now = time.Now
	}
	r.now = now
}

// DefaultSweepGrace is how long after its expiry a bucket or a hold may
// wait for its EXPIRATION or RELEASE, and a pending grant after its
// effective time for its MATURATION, before reconciliation reports it:
// time decides (a balance read does not count an expired bucket, and
// counts a matured grant), but the sweeper should put it on the record
// within a minute, and one that has not for this long says the sweeper is
// not running.
const DefaultSweepGrace = 10 * time.Minute

// LeaseKey is the lease-table key of the reconciliation lease.
const LeaseKey = "LOCK#reconcile"

// Run reconciles. It fails with a ledger error of reason
// RECONCILIATION_RUNNING while another reconciliation holds the lease.
func (r *Reconciler) Run(ctx context.Context, o Options) (Report, error) {
	if o.Segments <= 0 {
		o.Segments = 4
	}
	if o.ProjectionGrace <= 0 {
		o.ProjectionGrace = 5 * time.Second
	}
	if o.SweepGrace <= 0 {
		o.SweepGrace = DefaultSweepGrace
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 30 * time.Second
	}
	if o.Owner == "" {
		o.Owner = fmt.Sprintf("reconcile-%d", r.now().UnixNano())
	}
	if o.User != "" {
		if err := ledger.ValidateUserID(o.User); err != nil {
			return Report{}, err
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	unlock, err := r.leases.Lock(ctx, LeaseKey, o.Owner, o.LeaseTTL, func(err error) {
		cancel(fmt.Errorf("reconciliation lease: %w", err))
	})
	var held interface{ HeldBy() (string, time.Time) }
	if errors.As(err, &held) {
		owner, until := held.HeldBy()
		return Report{}, ledger.Errorf(ledger.KindFailedPrecondition, ledger.ReasonReconcileRunning,
			"another reconciliation is running (%s, lease until %s)", owner, until.UTC().Format(time.RFC3339))
	}
	if err != nil {
		return Report{}, err
	}
	defer func() {
		cancel(nil)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = unlock(rctx)
		rcancel()
	}()

	run := &pass{r: r, o: o, start: r.now(), limiter: newLimiter(o.Rate), liability: months{}, breakage: months{}, pending: months{},
		shares: map[string]ledger.BudgetShare{}}
	// Every scan reads under the rate: the count for progress, and the users.
	scanned := func(n int) { _ = run.limiter.wait(ctx, n); run.items.Add(int64(n)) }
	if o.User == "" {
		if run.total, err = r.store.CountAccounts(ctx, scanned); err != nil {
			return Report{}, err
		}
	}
	var budgetsBefore map[string]ledger.Budget
	if o.User == "" {
		if budgetsBefore, err = run.readBudgets(ctx); err != nil {
			return Report{}, err
		}
	}
	stopProgress := run.reportProgress()
	if o.User != "" {
		err = run.user(ctx, o.User)
	} else {
		err = r.store.Users(ctx, o.Segments, scanned, func(u string) error {
			return run.user(ctx, u)
		})
	}
	stopProgress()
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			err = cause
		}
		return Report{}, err
	}
	if o.User == "" {
		if err := run.checkBudgets(ctx, budgetsBefore); err != nil {
			return Report{}, err
		}
	}
	return run.report(), nil
}

// pass is one reconciliation's running state.
type pass struct {
	r       *Reconciler
	o       Options
	start   time.Time
	limiter *limiter
	total   int64

	users, entries, items, findingCount atomic.Int64

	mu                sync.Mutex
	findings          []ledger.Finding
	proposed          []Adjustment
	sumEntries        decimal.Decimal
	sumBalances       decimal.Decimal
	sumPendingChanges decimal.Decimal
	sumPending        decimal.Decimal
	liability         months
	breakage          months
	pending           months
	shares            map[string]ledger.BudgetShare // by budget, summed over users
	budgets           []BudgetReport
}

func (p *pass) user(ctx context.Context, user string) error {
	a, err := p.r.store.Partition(ctx, user)
	if err != nil {
		return err
	}
	if err := p.limiter.wait(ctx, a.Items); err != nil {
		return err
	}
	p.items.Add(int64(a.Items))
	folded, findings := ledger.Audit(a, p.start.Add(-p.o.SweepGrace))
	projFindings, err := p.projection(ctx, user, a)
	if err != nil {
		return err
	}
	if len(projFindings) > 0 && p.o.RepairProjection {
		if err := p.r.history.Rebuild(ctx, user); err != nil {
			return fmt.Errorf("repair projection of %q: %w", user, err)
		}
		after, err := p.projection(ctx, user, a)
		if err != nil {
			return err
		}
		if len(after) == 0 {
			for i := range projFindings {
				projFindings[i].Repaired = true
			}
		} else {
			projFindings = append(projFindings, after...)
		}
	}
	findings = append(findings, projFindings...)

	fold := folded.Balance
	p.users.Add(1)
	p.entries.Add(int64(len(a.Entries)))
	p.findingCount.Add(int64(len(findings)))
	p.mu.Lock()
	defer p.mu.Unlock()
	p.findings = append(p.findings, findings...)
	p.sumEntries = p.sumEntries.Add(fold)
	p.sumBalances = p.sumBalances.Add(a.Account.Balance)
	p.sumPendingChanges = p.sumPendingChanges.Add(folded.Pending)
	p.sumPending = p.sumPending.Add(a.Account.Pending)
	p.outstanding(a)
	p.propose(user, a, fold)
	return nil
}

// outstanding counts a user's points (with p.mu held) in the liability,
// breakage and pending as of the start: the account as time has decided
// it by then (what the sweeper would write: grants matured, holds
// released, buckets expired), so a grant whose effective time has come
// counts as matured points, and one still pending in neither liability
// nor breakage.
//
// With Options.AsOf, it is the account as of then: the fold of the
// entries written by then (ledger.FoldAsOf, the partition holds them all),
// and the EXPIRATION entries among them.
func (p *pass) outstanding(a ledger.Partition) {
	acct, entries, at := a.Account, a.Entries, p.start
	if !p.o.AsOf.IsZero() {
		at = ledger.Instant(p.o.AsOf)
		// A gap stops the fold; the audit reports it.
		acct, _ = ledger.FoldAsOf(ledger.NewAccount(a.Account.UserID), a.Entries, at)
		entries = entries[:min(int(acct.Version), len(entries))]
	}
	due := ledger.DecideExpiry(acct, at)
	after := due.After
	for _, b := range after.Buckets {
		p.liability.add(b.Expire, b.Kind, b.Amount)
	}
	for _, e := range due.Entries {
		if e.Type == ledger.EntryExpiration { // expired, not yet on the record
			for _, d := range e.Draws {
				p.breakage.add(d.Expire, d.Kind, d.Amount)
			}
		}
	}
	for _, e := range entries {
		if e.Type == ledger.EntryExpiration {
			rest := e.Amount.Neg()
			for _, d := range e.Draws {
				p.breakage.add(e.CreateTime, d.Kind, d.Amount)
				rest = rest.Sub(d.Amount)
			}
			if !rest.IsZero() { // an expiration without draws: standard points
				p.breakage.add(e.CreateTime, "", rest)
			}
		}
	}
	for _, l := range after.PendingLots {
		p.pending.add(l.EffectiveTime, l.Kind, l.Amount)
	}
	for id, s := range ledger.BudgetShares(a.Entries, p.start) {
		p.shares[id] = p.shares[id].Add(s)
	}
}

// propose proposes (with p.mu held) the adjustment that explains a
// balance its entries do not fold to.
func (p *pass) propose(user string, a ledger.Partition, fold decimal.Decimal) {
	if diff := a.Account.Balance.Sub(fold); !diff.IsZero() {
		p.proposed = append(p.proposed, Adjustment{
			UserID:          user,
			Amount:          diff.Abs().String(),
			Debit:           diff.IsNegative(),
			ExplainBalance:  true,
			ExpectedBalance: a.Account.Balance.String(),
			Reason:          fmt.Sprintf("reconciliation %s: balance %s is not the sum of the entries (%s)", p.start.UTC().Format(time.RFC3339), a.Account.Balance, fold),
			// One request id per account state, whichever run proposes it:
			// once one run's proposal is applied, another's is ALREADY_EXISTS
			// (their reasons differ) instead of explaining the balance twice.
			// The state is the version and the balance: a proposal refused
			// BALANCE_MOVED (the balance drifted again, with no new version)
			// stays refused under its request_id, and the next run's
			// proposal for the new balance needs one of its own.
			RequestID: fmt.Sprintf("reconcile-v%d-b%s", a.Account.Version, a.Account.Balance),
		})
	}
}

// projection compares the user's history with the ledger entries the audit
// read (a). A history behind the ledger gets ProjectionGrace to catch up. A
// history ahead of the audit (the ledger moved on while reconciliation ran,
// and the projector followed) is compared with the entries since, read from
// the ledger.
func (p *pass) projection(ctx context.Context, user string, a ledger.Partition) ([]ledger.Finding, error) {
	deadline := time.Now().Add(p.o.ProjectionGrace)
	for {
		st, items, err := p.snapshot(ctx, user)
		if err != nil {
			return nil, err
		}
		entries := a.Entries
		if st.Version > a.Account.Version {
			newer, err := p.r.store.EntriesAfter(ctx, user, a.Account.Version, int(min(st.Version-a.Account.Version, math.MaxInt32)))
			if err != nil {
				return nil, err
			}
			entries = append(slices.Clip(entries), newer...)
		}
		findings := history.Compare(user, entries, st, items)
		behind := st.Version < a.Account.Version
		if len(findings) == 0 || !behind || time.Now().After(deadline) {
			return findings, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// snapshotTries bounds how often snapshot reads a user's history again
// while the projector keeps committing to it.
const snapshotTries = 10

// snapshot reads a user's history state and items as of one moment. They
// are separate reads, and the projector may commit between them: items
// newer than the state read, or a purchase's refunded amount moved by a
// newer refund, would then look like findings. Every projector and rebuild
// commit moves the state in the same transaction as its items, so items read
// between two equal reads of the state are the items of that state. Under a
// projector that never pauses, the last try is compared without the items
// past its state.
func (p *pass) snapshot(ctx context.Context, user string) (history.State, []ledger.Entry, error) {
	st, err := p.r.history.State(ctx, user)
	if err != nil {
		return st, nil, err
	}
	for try := 1; ; try++ {
		items, err := p.r.history.Items(ctx, user)
		if err != nil {
			return st, nil, err
		}
		again, err := p.r.history.State(ctx, user)
		if err != nil {
			return st, nil, err
		}
		switch {
		case again.Version == st.Version && again.SameTotals(st):
			return st, items, nil
		case try == snapshotTries:
			return st, slices.DeleteFunc(items, func(e ledger.Entry) bool { return e.Version > st.Version }), nil
		}
		st = again
		select {
		case <-ctx.Done():
			return st, nil, ctx.Err()
		case <-time.After(time.Duration(try) * 5 * time.Millisecond):
		}
	}
}

func (p *pass) progress() Progress {
	return Progress{Users: p.users.Load(), TotalUsers: p.total, Entries: p.entries.Load(), Findings: p.findingCount.Load(), Elapsed: p.r.now().Sub(p.start)}
}

func (p *pass) reportProgress() (stop func()) {
	if p.o.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				p.o.Progress(p.progress())
				return
			case <-t.C:
				p.o.Progress(p.progress())
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func (p *pass) report() Report {
	p.mu.Lock()
	defer p.mu.Unlock()
	rep := Report{
		StartTime:     p.start.UTC(),
		DurationMS:    p.r.now().Sub(p.start).Milliseconds(),
		User:          p.o.User,
		Users:         p.users.Load(),
		Entries:       p.entries.Load(),
		ItemsRead:     p.items.Load(),
		SumOfEntries:  p.sumEntries.String(),
		SumOfBalances: p.sumBalances.String(),
		Findings:      append([]ledger.Finding{}, p.findings...),
		Proposed:      append([]Adjustment{}, p.proposed...),
		Liability:     p.liability.list(),
		AsOf:          asOf(p.o.AsOf),
		Breakage:      p.breakage.list(),
		Pending:       p.pending.list(),
		Budgets:       append([]BudgetReport{}, p.budgets...),

		SumOfPendingChanges: p.sumPendingChanges.String(),
		SumOfPending:        p.sumPending.String(),
	}
	if !p.sumEntries.Equal(p.sumBalances) {
		rep.Findings = append(rep.Findings, ledger.Finding{Kind: ledger.FindingSumMismatch, Expected: rep.SumOfEntries, Found: rep.SumOfBalances})
	}
	if !p.sumPendingChanges.Equal(p.sumPending) {
		rep.Findings = append(rep.Findings, ledger.Finding{Kind: ledger.FindingSumMismatch, Expected: "pending " + rep.SumOfPendingChanges, Found: "pending " + rep.SumOfPending})
	}
	slices.SortFunc(rep.Findings, func(a, b ledger.Finding) int {
		return strings.Compare(a.UserID+"\x00"+a.BudgetID+"\x00"+a.Kind, b.UserID+"\x00"+b.BudgetID+"\x00"+b.Kind)
	})
	slices.SortFunc(rep.Proposed, func(a, b Adjustment) int { return strings.Compare(a.UserID, b.UserID) })
	rep.Clean = rep.Unrepaired() == 0
	return rep
}

// limiter lets through at most rate items a second, on average (a token
// bucket of one second's worth); rate 0 lets everything through.
type limiter struct {
	mu     sync.Mutex
	rate   float64
	tokens float64
	last   time.Time
}

func newLimiter(rate int) *limiter {
	return &limiter{rate: float64(rate), tokens: float64(rate), last: time.Now()}
}

func (l *limiter) wait(ctx context.Context, n int) error {
	if l.rate <= 0 || n <= 0 {
		return nil
	}
	l.mu.Lock()
	now := time.Now()
	l.tokens = min(l.rate, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	l.last = now
	l.tokens -= float64(n)
	var d time.Duration
	if l.tokens < 0 {
		d = time.Duration(-l.tokens / l.rate * float64(time.Second))
	}
	l.mu.Unlock()
	if d == 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// asOf is the time a report's figures are of, as Options.AsOf asked it:
// at the stores' precision, or zero.
func asOf(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return ledger.Instant(t)
}
