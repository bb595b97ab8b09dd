package stream

import (
	"context"
	"time"
)

// requestCatchUp records a catch-up request in the lease table (see
// LeaseTable.RequestCatchUp) before the caller reads on past a loss, and
// wakes the catch-up loop.
func (c *Consumer) requestCatchUp(ctx context.Context) error {
	if _, ok := c.handler.(CatchUpper); !ok {
		c.log.ErrorContext(ctx, "stream records were lost, and this consumer's handler cannot catch up from the ledger")
		return nil
	}
	if err := c.leases.RequestCatchUp(ctx, CatchUpKey(c.o.Name, c.table)); err != nil {
		return err
	}
	c.wakeCatchUp()
	return nil
}

func (c *Consumer) wakeCatchUp() {
	select {
	case c.catchUp <- struct{}{}:
	default: // one is pending already
	}
}

// catchUpLoop answers the catch-up requests of the consumers of its name:
// its own at once, and any left by one that stopped before answering them,
// found when it starts and every DiscoverInterval. It runs only if the
// handler is a CatchUpper.
func (c *Consumer) catchUpLoop(ctx context.Context) {
	tick := time.NewTicker(c.o.DiscoverInterval)
	defer tick.Stop()
	key := CatchUpKey(c.o.Name, c.table)
	for {
		if err := c.answerCatchUps(ctx, key); err != nil && ctx.Err() == nil {
			c.log.ErrorContext(ctx, "catch-up from the ledger failed; will retry", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-c.catchUp:
		case <-tick.C:
		}
	}
}

// answerCatchUps catches up from the ledger if requests wait under key, and
// clears the ones it answered.
func (c *Consumer) answerCatchUps(ctx context.Context, key string) error {
	requests, err := c.leases.CatchUpRequests(ctx, key)
	if err != nil || requests == 0 {
		return err
	}
	users, err := c.handler.(CatchUpper).CatchUp(ctx)
	if err != nil {
		return err
	}
	c.log.InfoContext(ctx, "caught up from the ledger", "users_behind", users)
	cleared, err := c.leases.ClearCatchUp(ctx, key, requests)
	if err == nil && !cleared {
		c.wakeCatchUp() // more came meanwhile
	}
	return err
}
