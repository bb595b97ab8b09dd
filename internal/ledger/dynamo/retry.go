package dynamo

import (
	"context"
	"math/rand/v2"
	"time"
)

// Retry bounds the retries of an attempt that lost a race.
type Retry struct {
	// Backoff is for a lost race: a concurrent transaction, a version
	// moved, a stale cache.
	Backoff
	// Throttled is for DynamoDB refusing the writes for capacity: a
	// partition refills over a second, so its waits are longer, and they
	// are counted apart from the races (zero: DefaultRetry's).
	Throttled Backoff
}

// Backoff is a bounded schedule of jittered waits.
type Backoff struct {
	MaxAttempts int           // attempts in all, at least 1
	BaseDelay   time.Duration // the first backoff's upper bound
	MaxDelay    time.Duration // no backoff is longer
}

// DefaultRetry suits a hot user on the real service: about 1.5 s in the
// worst case for races; for throttles about 12 s, which covers a full
// group's refill even at a tenth of a partition's capacity (the proxy's
// -partition-scale 0.1: a group of 194 write units waits about 1.9 s).
var DefaultRetry = Retry{
	Backoff:   Backoff{MaxAttempts: 10, BaseDelay: 5 * time.Millisecond, MaxDelay: 250 * time.Millisecond},
	Throttled: Backoff{MaxAttempts: 10, BaseDelay: 100 * time.Millisecond, MaxDelay: 2 * time.Second},
}

// backoff is "full jitter": uniform in [0, min(MaxDelay, BaseDelay*2^(attempt-1))].
func (r Backoff) backoff(attempt int) time.Duration {
	d := r.BaseDelay << min(attempt-1, 20)
	if d <= 0 || d > r.MaxDelay {
		d = r.MaxDelay
	}
	if d <= 0 {
		return 0
	}
	return rand.N(d + 1)
}

// pause waits d unless ctx ends first, and reports whether it did not.
func pause(ctx context.Context, d time.Duration) bool {
	return sleep(ctx, d) == nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
