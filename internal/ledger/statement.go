package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/shopspring/decimal"
)

// The account at a time, and statements (issue 34). Neither folds anything
// of its own: the account as of t is Account.Apply of the entries written
// at or before t, from the nearest snapshot of the aggregate before them,
// and what time decided by t (expiry, hold expiry, maturity) is what a
// balance read answers, Account.At.

// SnapshotEvery is how many entries a store lets pass between two snapshots
// of a user's aggregate, at most (SnapshotDue): the account as of any time
// folds at most that many entries, and as many more as one transaction
// writes, onto the snapshot before it, however many entries the user has.
const SnapshotEvery = 64

// SnapshotDue says whether a commit that moves an account from version
// before to version after crosses a multiple of SnapshotEvery: then the
// store writes a snapshot of the account after it, with it.
func SnapshotDue(before, after int64) bool {
	return after > before && after/SnapshotEvery > before/SnapshotEvery
}

// Instant is t at the precision the stores keep entry times in (the
// microsecond): as_of, start_time and end_time are read at it, so that an
// entry written at t is "at t" whatever digits the request sent beyond it.
func Instant(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// JustBefore is the last instant a store keeps strictly before t (the
// microsecond before Instant(t)): the entries written before t are those
// written at or before JustBefore(t).
func JustBefore(t time.Time) time.Time { return Instant(t).Add(-time.Microsecond) }

// FoldAsOf is the account at t as the entries recorded it: base (a
// snapshot of the aggregate at its version, or NewAccount for none) with
// the entries after it that were written at or before t folded in by
// Account.Apply. entries is in version order from base.Version+1; it may
// run past t (entry times never go back as versions go up), and what is
// past t is left out. A version out of order is an error, as in Fold.
// What time decided by t and no entry says yet is the caller's:
// Account.At(t), as a balance read does.
func FoldAsOf(base Account, entries []Entry, t time.Time) (Account, error) {
	t = Instant(t)
	a := base
	for _, e := range entries {
		if e.CreateTime.After(t) {
			break
		}
		if e.Version != a.Version+1 {
			return a, fmt.Errorf("entry version %d of %q does not follow version %d", e.Version, a.UserID, a.Version)
		}
		a = a.Apply(e)
	}
	return a, nil
}

// AccountAsOf is what a store answers for the account at t: what the
// entries recorded (FoldAsOf) of a user who has entries. It is the
// zero-valued account of user, version 0, before the first entry.
func AccountAsOf(user string, base Account, entries []Entry, t time.Time) (Account, error) {
	if base.Version == 0 {
		base = NewAccount(user)
	}
	return FoldAsOf(base, entries, t)
}

// AsOfReader is what a statement reads of a store: the account as the
// entries recorded it at a time (AccountAt: the fold of the entries
// written at or before it, without what time decided since), and entries
// by version.
type AsOfReader interface {
	AccountAt(ctx context.Context, user string, t time.Time) (Account, error)
	EntriesAfter(ctx context.Context, user string, after int64, limit int) ([]Entry, error)
}

// StatementQuery asks for a user's statement of [Start, End), paged.
type StatementQuery struct {
	Page       // the page token is good only with the same window
	Start, End time.Time
}

// Check validates a statement query: the user id, the page size and a
// window whose start is before its end, both set. It returns q with its
// page size resolved and its times at the stores' precision (Instant).
func (q StatementQuery) Check(user string) (StatementQuery, error) {
	if err := ValidateUserID(user); err != nil {
		return q, err
	}
	page, err := q.check()
	if err != nil {
		return q, err
	}
	q.Page = page
	if q.Start.IsZero() || q.End.IsZero() {
		return q, Errorf(KindInvalid, ReasonInvalidFilter, "start_time and end_time are both required")
	}
	q.Start, q.End = Instant(q.Start), Instant(q.End)
	if !q.Start.Before(q.End) {
		return q, Errorf(KindInvalid, ReasonInvalidFilter, "start_time must be before end_time")
	}
	return q, nil
}

// StatementTotals are the signed sums of a statement window's amounts by
// the movement their entry type is: Spent (purchases and captures) and
// Expired are negative or zero, Adjusted and Reversed net. Holds and
// releases move no amount and are in none.
type StatementTotals struct {
	Granted  decimal.Decimal // GRANT
	Matured  decimal.Decimal // MATURATION
	Spent    decimal.Decimal // PURCHASE, CAPTURE
	Refunded decimal.Decimal // REFUND
	Expired  decimal.Decimal // EXPIRATION
	Adjusted decimal.Decimal // ADJUSTMENT
	Reversed decimal.Decimal // REVERSAL
}

// Add is t with e's amount in the total of its type.
func (t StatementTotals) Add(e Entry) StatementTotals {
	switch e.Type {
	case EntryGrant:
		t.Granted = t.Granted.Add(e.Amount)
	case EntryMaturation:
		t.Matured = t.Matured.Add(e.Amount)
	case EntryPurchase, EntryCapture:
		t.Spent = t.Spent.Add(e.Amount)
	case EntryRefund:
		t.Refunded = t.Refunded.Add(e.Amount)
	case EntryExpiration:
		t.Expired = t.Expired.Add(e.Amount)
	case EntryAdjustment:
		t.Adjusted = t.Adjusted.Add(e.Amount)
	case EntryReversal:
		t.Reversed = t.Reversed.Add(e.Amount)
	case EntryHold, EntryRelease: // no amount
	}
	return t
}

// Sum is the sum of every total: the window's amounts.
func (t StatementTotals) Sum() decimal.Decimal {
	return t.Granted.Add(t.Matured).Add(t.Spent).Add(t.Refunded).Add(t.Expired).Add(t.Adjusted).Add(t.Reversed)
}

// Statement is a user's account over the window [Start, End).
//
// Opening and Closing are the balances at Start and at End from the
// entries written before each (an entry written at Start is in the
// window, not in Opening), with expiry and maturity by time at that
// instant, as a balance read then would have answered. Unrecorded is
// what time decided that the window's entries do not say: points that
// expired or matured by End whose EXPIRATION or MATURATION was written at
// or after End (they move Closing, and no entry of the window), less
// those decided by Start whose entry was written in the window (they
// moved Opening already, and their entry is in the window too). So
//
//	Opening + Totals.Sum() + Unrecorded = Closing.
type Statement struct {
	UserID           string
	Start, End       time.Time
	Opening, Closing decimal.Decimal
	// OpeningVersion and ClosingVersion are the versions of the last entry
	// before Start and before End: the window's entries are the versions
	// after the first up to the second.
	OpeningVersion, ClosingVersion int64
	Totals                         StatementTotals
	Unrecorded                     decimal.Decimal
	// Entries is the window's entries, in version order: all of them as
	// NewStatement is given them; a page of them as a store answers.
	Entries []Entry
}

// NewStatement is the statement of [start, end) of the accounts opening
// and closing (the entries' folds before start and before end, as
// FoldAsOf answers them at JustBefore) and the entries between them
// (window: versions opening.Version+1 to closing.Version, in order).
func NewStatement(user string, start, end time.Time, opening, closing Account, window []Entry) (Statement, error) {
	start, end = Instant(start), Instant(end)
	s := Statement{
		UserID: user, Start: start, End: end,
		OpeningVersion: opening.Version, ClosingVersion: closing.Version,
		Entries: window,
	}
	if want := closing.Version - opening.Version; int64(len(window)) != want {
		return s, fmt.Errorf("statement of %q: %d entries between versions %d and %d, want %d", user, len(window), opening.Version, closing.Version, want)
	}
	for i, e := range window {
		if e.Version != opening.Version+int64(i)+1 {
			return s, fmt.Errorf("statement of %q: entry version %d out of order", user, e.Version)
		}
		s.Totals = s.Totals.Add(e)
	}
	s.Opening = opening.At(start).Balance
	s.Closing = closing.At(end).Balance
	// What time decided at each end and no entry before it records: the
	// difference between the balance at that instant and the recorded one.
	atStart := s.Opening.Sub(opening.Balance)
	atEnd := s.Closing.Sub(closing.Balance)
	s.Unrecorded = atEnd.Sub(atStart)
	return s, nil
}

// ReadStatement reads the statement of q (checked: Check) from r: the
// accounts before Start and before End, and every entry between them.
// Its cost is two reads of an account at a time (bounded, see
// SnapshotEvery) and the window's entries.
func ReadStatement(ctx context.Context, r AsOfReader, user string, q StatementQuery) (Statement, error) {
	opening, err := r.AccountAt(ctx, user, JustBefore(q.Start))
	if err != nil {
		return Statement{}, err
	}
	closing, err := r.AccountAt(ctx, user, JustBefore(q.End))
	if err != nil {
		return Statement{}, err
	}
	var window []Entry
	for after := opening.Version; after < closing.Version; {
		es, err := r.EntriesAfter(ctx, user, after, int(min(closing.Version-after, MaxPageSize)))
		if err != nil {
			return Statement{}, err
		}
		if len(es) == 0 {
			break // NewStatement reports the missing entries
		}
		window = append(window, es...)
		after = es[len(es)-1].Version
	}
	return NewStatement(user, q.Start, q.End, opening, closing, window)
}

// Page is the window's entries with versions above after, at most limit
// of them: what a page of the statement lists.
func (s Statement) Page(after int64, limit int) []Entry {
	from := max(after-s.OpeningVersion, 0)
	if from >= int64(len(s.Entries)) {
		return nil
	}
	es := s.Entries[from:]
	return es[:min(len(es), limit)]
}
