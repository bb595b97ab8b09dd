package ledger

import (
	"context"
)

// Store keeps users' ledgers. Every store keeps the invariants of this
// package (see doc.go) and decides with Decide; ledgertest.Contract is the
// suite every store must pass. The DynamoDB store is package dynamo; an
// in-memory one, for tests, is package memory.
type Store interface {
	// Apply appends the entries m decides, exactly once per request_id: a
	// retry of the same request gets the original result (Replayed), or the
	// original refusal if it was refused for a business reason (a *Error
	// with Replayed), and another request under the same request_id gets
	// KindAlreadyExists.
	Apply(ctx context.Context, m Mutation) (Result, error)
	// Balance reads a user's account, consistently; a user with no entries
	// is the zero Account.
	Balance(ctx context.Context, user string) (Account, error)
	// EntriesAfter returns up to limit entries of user with versions above
	// after, in version order, consistently.
	EntriesAfter(ctx context.Context, user string, after int64, limit int) ([]Entry, error)
	// Expire writes what time decided of user by now, if anything is due
	// (the sweeper's call): the maturations of pending grants, the
	// releases of expired holds and the expiration of expired points. It
	// returns the last entry it wrote, or a zero Result when nothing was
	// due.
	Expire(ctx context.Context, user string) (Result, error)
	// SetStatus moves an existing account to status, and says whether it
	// changed anything.
	SetStatus(ctx context.Context, user string, status Status, reason string) (Account, bool, error)
	// Holds pages through user's holds in the states q asks for (none:
	// HELD), oldest first, consistently. A held hold at or past its
	// expire_time is answered EXPIRED (Hold.StateAt), and matches states as
	// that.
	Holds(ctx context.Context, user string, q HoldQuery) ([]Hold, string, error)
	// Partition reads all a store keeps of user, consistently and as of
	// one version of its account, for Audit.
	Partition(ctx context.Context, user string) (Partition, error)
}
