package stream

import (
	"context"
	"errors"
	"sync"

	"github.com/pointledger/pointledger/internal/ledger"
)

// Handler takes the ledger entries a consumer reads from the stream, a
// batch at a time. The consumer checkpoints a batch only after Apply
// returns nil, and reads it again after a crash or a takeover, so Apply
// must be idempotent: an entry it has seen changes nothing the second time.
type Handler interface {
	Apply(ctx context.Context, entries []ledger.Entry) error
}

// CatchUpper is a Handler that can bring itself up to date from the ledger
// itself, for records the stream lost (its retention is 24 hours). A
// consumer whose handler is not one logs the loss and reads on.
type CatchUpper interface {
	Handler
	// CatchUp brings every user that is behind up to date and says how
	// many were.
	CatchUp(ctx context.Context) (users int, err error)
}

// ShardTaker is a Handler that wants to know when its consumer takes a
// shard's lease, before the shard's first batch: what it remembers of the
// users of a shard that another consumer held meanwhile may be out of date
// (the dispatcher's memory of users without a queue, internal/dispatch).
type ShardTaker interface {
	Handler
	ShardTaken(shardID string)
}

// FanOut returns a handler that hands each batch to every handler at
// once, so that one reader of the stream feeds several (history and
// deliveries), a batch taking as long as its slowest handler, not their
// sum. A batch fails if any handler fails (their errors joined), and is
// read again for all of them: the others see it twice, which idempotence
// allows. It catches up the handlers that are CatchUppers, one after the
// other, and counts the users behind summed over them; it tells those
// that are ShardTakers of each shard taken.
func FanOut(handlers ...Handler) CatchUpper {
	return fanOut(handlers)
}

type fanOut []Handler

func (f fanOut) Apply(ctx context.Context, entries []ledger.Entry) error {
	if len(f) == 1 {
		return f[0].Apply(ctx, entries)
	}
	errs := make([]error, len(f))
	var wg sync.WaitGroup
	for i, h := range f {
		wg.Go(func() { errs[i] = h.Apply(ctx, entries) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ShardTaken tells each handler that is a ShardTaker.
func (f fanOut) ShardTaken(shardID string) {
	for _, h := range f {
		if t, ok := h.(ShardTaker); ok {
			t.ShardTaken(shardID)
		}
	}
}

func (f fanOut) CatchUp(ctx context.Context) (int, error) {
	behind := 0
	for _, h := range f {
		c, ok := h.(CatchUpper)
		if !ok {
			continue
		}
		users, err := c.CatchUp(ctx)
		if err != nil {
			return behind, err
		}
		behind += users
	}
	return behind, nil
}
