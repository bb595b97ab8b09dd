// Package sweep puts expired points and holds, and pending grants that
// matured, on the record for users who are idle.
//
// Expiry is decided by time: a bucket past its expire_time is not spendable,
// and a hold past its own is released, whether or not an entry says so, and
// a user's next mutation writes the RELEASEs and the EXPIRATION first;
// pending points are spendable from their effective time, and the
// MATURATION is written the same way. For users who make no mutation, a
// Sweeper writes them: it asks the store's index of next expiries (whose
// time is ledger.Account.NextDue, maturities included) which users have
// something due (never a table scan), and has the store decide each on a
// consistent read.
// The index is split in shards; each pass takes a lease on a shard before
// it sweeps it, so several sweepers (one in each ledgerd serve, say) share
// the work without doing it twice at once. Doing it twice would be harmless
// anyway: the second finds nothing due.
package sweep

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/shardpass"
)

// Store is what a sweeper needs of the ledger.
type Store interface {
	// DueUsers calls fn with each user whose next expiry, as the index
	// says, is at or before t, in shard.
	DueUsers(ctx context.Context, shard int, t time.Time, fn func(user string) error) error
	// Expire writes the expiration of user's points due now, if any.
	Expire(ctx context.Context, user string) (ledger.Result, error)
}

// Leases share the index's shards between sweepers: the lease table's
// Lock (projection.LeaseTable in ledgerd; memory.Leases in tests), as
// reconcile.Leases. The pass over them is shardpass's, which the notice
// finder runs too.
type Leases = shardpass.Leases

// Options say how a Sweeper works; the zero value is the default.
type Options struct {
	Shards   int              // the store's index shards; 0: 16
	Interval time.Duration    // between passes; 0: 15 s, so that points are on the record within a minute
	LeaseTTL time.Duration    // of a shard's lease; 0: 1 min
	Owner    string           // the lease owner's name; "": shardpass.DefaultOwner (the host, the pid and a random suffix)
	Workers  int              // users expired at once; 0: 8
	Now      func() time.Time // the clock that says what is due; nil: time.Now
	Log      *slog.Logger     // nil: slog.Default()
}

// Progress is what sweeping has done.
type Progress struct {
	Passes   int64           `json:"passes"`
	Shards   int64           `json:"shards_swept"`
	Users    int64           `json:"users_checked"` // nominated by the index
	Expired  int64           `json:"users_expired"` // who had points or holds due, or grants maturing
	Points   decimal.Decimal `json:"points_expired"`
	Duration time.Duration   `json:"duration"` // spent sweeping
}

// Rate is the users checked a second while sweeping.
func (p Progress) Rate() float64 {
	if p.Duration <= 0 {
		return 0
	}
	return float64(p.Users) / p.Duration.Seconds()
}

func (p Progress) String() string {
	return fmt.Sprintf("%d passes, %d shards, %d users checked, %d expired (%s points), %.0f users/s",
		p.Passes, p.Shards, p.Users, p.Expired, p.Points, p.Rate())
}

// Sweeper writes the expirations idle users' points are due.
type Sweeper struct {
	store Store
	pass  *shardpass.Pass
	o     Options
}

// New returns a Sweeper of store, sharing shards by leases in leases.
func New(store Store, leases Leases, o Options) *Sweeper {
	if o.Interval <= 0 {
		o.Interval = 15 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	pass := shardpass.New(leases, LeaseKey, shardpass.Options{
		Shards: o.Shards, LeaseTTL: o.LeaseTTL, Owner: o.Owner, Workers: o.Workers, Log: o.Log, Name: "sweeper"})
	return &Sweeper{store: store, pass: pass, o: o}
}

// LeaseKey names a shard's lease in the lease table.
func LeaseKey(shard int) string { return fmt.Sprintf("SWEEP#%02d", shard) }

// Pass sweeps every shard no other sweeper holds, once, and says what it did.
func (s *Sweeper) Pass(ctx context.Context) (Progress, error) {
	start := time.Now()
	p := Progress{Passes: 1, Points: decimal.Zero}
	var mu sync.Mutex
	shards, err := s.pass.Run(ctx, func(shard int) shardpass.Shard {
		return shardpass.Shard{
			Due: func(ctx context.Context, fn func(string) error) error {
				return s.store.DueUsers(ctx, shard, s.o.Now(), fn)
			},
			Each: func(ctx context.Context, user string) error {
				res, err := s.store.Expire(ctx, user)
				if err != nil {
					return fmt.Errorf("expire %q: %w", user, err)
				}
				mu.Lock()
				defer mu.Unlock()
				p.Users++
				if res.Entry.Type != "" { // its last entry: releases of holds come first
					p.Expired++
				}
				if res.Entry.Type == ledger.EntryExpiration {
					p.Points = p.Points.Sub(res.Entry.Amount)
				}
				return nil
			},
		}
	})
	p.Shards = shards
	if err != nil {
		return p, err
	}
	p.Duration = time.Since(start)
	return p, nil
}

// Run sweeps every Interval until ctx ends, logging what each pass did when
// it did something, and the totals every ten minutes. A failed pass is
// logged and tried again at the next.
func (s *Sweeper) Run(ctx context.Context) error {
	total := Progress{Points: decimal.Zero}
	lastReport := time.Now()
	for ctx.Err() == nil { // stopped is not an error
		p, err := s.Pass(ctx)
		total.Passes, total.Shards, total.Users, total.Expired = total.Passes+p.Passes, total.Shards+p.Shards, total.Users+p.Users, total.Expired+p.Expired
		total.Points, total.Duration = total.Points.Add(p.Points), total.Duration+p.Duration
		switch {
		case err != nil:
			s.o.Log.WarnContext(ctx, "sweeper: pass failed; trying again at the next", "error", err)
		case p.Expired > 0:
			s.o.Log.InfoContext(ctx, "sweeper: expired points put on the record", "users_checked", p.Users, "users_expired", p.Expired,
				"points", p.Points.String(), "duration", p.Duration, "users_per_second", p.Rate())
		}
		if time.Since(lastReport) >= 10*time.Minute {
			s.o.Log.InfoContext(ctx, "sweeper: totals", "progress", total.String())
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
		case <-time.After(s.o.Interval):
		}
	}
	return nil
}
