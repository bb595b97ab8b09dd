package memory

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Leases are locks by key in memory, as the DynamoDB lease table's Lock
// keeps them (stream.LeaseTable): one owner at a time, until it unlocks or
// its lease expires by the clock. They serve reconciliation over a memory
// store (reconcile.Leases) and the tests of the sweeper and of its pass
// (shardpass.Leases). A lease held here is never lost: nothing renews it,
// and nothing else takes it before it expires.
type Leases struct {
	mu   sync.Mutex
	now  func() time.Time
	held map[string]heldLease
}

type heldLease struct {
	owner string
	until time.Time
}

// NewLeases returns leases on the clock now (nil: time.Now).
func NewLeases(now func() time.Time) *Leases {
	if now == nil {
		now = time.Now
	}
	return &Leases{now: now, held: map[string]heldLease{}}
}

// LeaseHeldError is Lock's refusal while another owner holds the lease.
type LeaseHeldError struct {
	Key, Owner string
	Until      time.Time
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("lease %s is held by another owner (%s, until %s)", e.Key, e.Owner, e.Until.UTC().Format(time.RFC3339))
}

// HeldBy names the owner that holds the lease, and until when.
func (e *LeaseHeldError) HeldBy() (owner string, until time.Time) { return e.Owner, e.Until }

// Lock takes key for owner for ttl, and keeps it until unlock (in memory,
// an unlock is all it takes to keep it: lost is never called). While
// another owner holds it, unexpired, Lock fails with a *LeaseHeldError;
// the same owner takes it again.
func (l *Leases) Lock(_ context.Context, key, owner string, ttl time.Duration, _ func(error)) (unlock func(context.Context) error, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if h, ok := l.held[key]; ok && h.owner != owner && now.Before(h.until) {
		return nil, &LeaseHeldError{Key: key, Owner: h.owner, Until: h.until}
	}
	l.held[key] = heldLease{owner: owner, until: now.Add(ttl)}
	return func(context.Context) error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if h, ok := l.held[key]; ok && h.owner == owner {
			delete(l.held, key)
		}
		return nil
	}, nil
}
