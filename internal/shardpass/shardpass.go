// Package shardpass is the leased, sharded pass that the sweeper
// (internal/sweep) and the notice finder (internal/notice) both run over
// the ledger's index of next expiries: for each of the index's shards, take
// the shard's lease (skip it while another owner holds it), list the
// shard's due users, hand each to a pool of workers, then let the lease
// go.
//
// What holds:
//
//   - A shard is worked by one owner at a time while its lease lasts; the
//     lease is renewed while the shard is worked (the Leases' Lock) and let
//     go after it, even when ctx ended.
//   - The first failure of a user stops the shard (its listing and its other
//     users) and the pass, and is the pass's error; shards done before it
//     are counted.
//   - It imports no SDK: the leases are an interface (stream.LeaseTable in
//     ledgerd, memory.Leases in tests).
package shardpass

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
)

// Leases share the index's shards between owners: the lease table's Lock
// (stream.LeaseTable, named projection.LeaseTable in ledgerd; memory.Leases
// in tests), as reconcile.Leases.
type Leases interface {
	// Lock takes key for owner and keeps it until unlock; lost is told if
	// it is lost meanwhile. While another owner holds key, its error has a
	// method HeldBy() (owner string, until time.Time).
	Lock(ctx context.Context, key, owner string, ttl time.Duration, lost func(error)) (unlock func(context.Context) error, err error)
}

// Options say how a Pass works; the zero value is the default.
type Options struct {
	Shards   int           // the store's index shards; 0: 16
	LeaseTTL time.Duration // of a shard's lease; 0: 1 min
	Owner    string        // the lease owner's name; "": DefaultOwner()
	Workers  int           // users worked at once; 0: 8
	Log      *slog.Logger  // nil: slog.Default()
	Name     string        // what runs the pass, in its logs and errors ("sweeper", "notices")
}

// DefaultOwner names this process as a lease owner: the host, the pid and
// a random part, so that a restarted process is another owner. A stream
// consumer's owner is named so too (stream.DefaultOwner).
func DefaultOwner() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), ulid.Make().String()[20:])
}

// Pass works the shards of an index under leases.
type Pass struct {
	leases Leases
	key    func(shard int) string
	o      Options
}

// New returns a Pass whose shards' leases are in leases, under key(shard).
func New(leases Leases, key func(shard int) string, o Options) *Pass {
	if o.Shards <= 0 {
		o.Shards = 16
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = time.Minute
	}
	if o.Owner == "" {
		o.Owner = DefaultOwner()
	}
	if o.Workers <= 0 {
		o.Workers = 8
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Pass{leases: leases, key: key, o: o}
}

// Shard is the work of one shard: Due lists its due users, calling fn with
// each, and Each works one of them (Workers at a time, so Each must be safe
// for concurrent use). An error of Due or Each stops the shard.
type Shard struct {
	Due  func(ctx context.Context, fn func(user string) error) error
	Each func(ctx context.Context, user string) error
}

// Run works, once, every shard no other owner holds: shard(n) says what to
// do with shard n (called once the shard's lease is taken). It returns the
// number of shards worked, and stops at the first that failed.
func (p *Pass) Run(ctx context.Context, shard func(n int) Shard) (worked int64, err error) {
	for n := range p.o.Shards {
		unlock, err := p.leases.Lock(ctx, p.key(n), p.o.Owner, p.o.LeaseTTL, func(err error) {
			p.o.Log.WarnContext(ctx, p.o.Name+": lease renewal failed", "shard", n, "error", err)
		})
		var held interface{ HeldBy() (string, time.Time) }
		if errors.As(err, &held) {
			continue // another owner has it
		}
		if err != nil {
			return worked, err
		}
		err = work(ctx, p.o.Workers, shard(n))
		if rerr := unlock(context.WithoutCancel(ctx)); rerr != nil && err == nil {
			p.o.Log.WarnContext(ctx, p.o.Name+": release lease", "shard", n, "error", rerr)
		}
		if err != nil {
			return worked, fmt.Errorf("%s of shard %d: %w", p.o.Name, n, err)
		}
		worked++
	}
	return worked, nil
}

// work hands the shard's due users to workers Each; the first error cancels
// the rest.
func work(ctx context.Context, workers int, s Shard) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	users := make(chan string)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for user := range users {
				if err := s.Each(ctx, user); err != nil {
					cancel(err)
				}
			}
		})
	}
	err := s.Due(ctx, func(user string) error {
		select {
		case users <- user:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	close(users)
	wg.Wait()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}
