package api

import (
	"context"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
)

// DefaultHistoryWait is how long ListHistory waits, by default, for the
// history to reach a min_version: many times the projection's lag when the
// projector keeps up (a few hundred milliseconds), short enough that an app
// waiting on it can say something else in time.
const DefaultHistoryWait = 2 * time.Second

// MaxHistoryWait bounds the history wait a server may be given: a request
// waits that long at most, well within the server's write timeout.
const MaxHistoryWait = 30 * time.Second

// Polling the history's state: the first read again after historyPollFirst,
// each later one twice as late, up to historyPollMax apart. The state is one
// consistent read of one item, so even a whole wait at the longest interval
// costs a few dozen reads; the short first intervals answer soon after a
// projector that is a moment behind catches up.
const (
	historyPollFirst = 10 * time.Millisecond
	historyPollMax   = 100 * time.Millisecond
)

// SetHistoryWait sets how long ListHistory waits for the history to reach a
// min_version (default DefaultHistoryWait; 0: not at all, the history is
// read once).
func (s *LedgerService) SetHistoryWait(d time.Duration) { s.historyWait = max(d, 0) }

// awaitHistory returns once user's history has every entry up to version
// want: read your writes. The history is the projection of the ledger's
// stream; its state's version is the last entry it applied, and moves in
// the same write as the items up to it, so once the state (read
// consistently) has reached want, a consistent read of the items has them.
//
// A version past the ledger's own is refused at once, as no waiting can
// reach it; the ledger is read only when the history is behind, so a
// history that keeps up costs one read. A history still behind after the
// wait (or three quarters of what is left of the request's deadline, so
// that the answer says why rather than the deadline passing) is
// HISTORY_BEHIND, unavailable: retry, or read the ledger.
func (s *LedgerService) awaitHistory(ctx context.Context, user string, want int64) error {
	if want < 0 {
		return ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidMinVersion, "min_version %d: want a version (1, 2, ...) or 0", want)
	}
	st, err := s.history.State(ctx, user)
	if err != nil || st.Version >= want {
		return err
	}
	acct, err := s.ledger.Balance(ctx, user)
	if err != nil {
		return err
	}
	if acct.Version < want {
		return ledger.Errorf(ledger.KindFailedPrecondition, ledger.ReasonMinVersionAhead,
			"min_version %d is past the ledger of user %q, at version %d: no answer gave that version", want, user, acct.Version)
	}
	start := time.Now()
	wait := s.historyWait
	if deadline, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(deadline)*3/4)
	}
	for poll := historyPollFirst; ; poll = min(2*poll, historyPollMax) {
		left := wait - time.Since(start)
		if left <= 0 {
			return ledger.Errorf(ledger.KindUnavailable, ledger.ReasonHistoryBehind,
				"the history of user %q has reached version %d, not min_version %d, after waiting %v: try again, or read the ledger (ListEntries)",
				user, st.Version, want, max(wait, 0).Round(time.Millisecond))
		}
		timer := time.NewTimer(min(poll, left))
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
		if st, err = s.history.State(ctx, user); err != nil || st.Version >= want {
			return err
		}
	}
}
