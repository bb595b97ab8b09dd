package notice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/shardpass"
	"github.com/pointledger/pointledger/internal/webhook"
)

// DefaultLead is the lead of a notice when none is configured.
const DefaultLead = 7 * 24 * time.Hour

// Store is what a finder needs of the ledger.
type Store interface {
	// DueUsers calls fn with each user whose next expiry, as the index
	// says, is at or before t, in shard.
	DueUsers(ctx context.Context, shard int, t time.Time, fn func(user string) error) error
	// Balance reads a user's account, consistently.
	Balance(ctx context.Context, user string) (ledger.Account, error)
}

// Notice is one decided notice: the event for one user, bucket and lead,
// and whether Emit has taken it.
type Notice struct {
	UserID  string
	Expire  time.Time     // the bucket's expire_time
	Kind    string        // the bucket's kind ("": standard)
	Lead    time.Duration // how long before Expire it was due
	Event   webhook.Event // the same on every Emit: its ID was drawn once, when the notice was written
	Emitted bool          // Emit returned nil for it once
}

// Notices keep the decided notices (internal/notice/dynamo keeps them in
// the webhooks table): what makes each decided once.
type Notices interface {
	// Write puts n unless a notice of its user, bucket and lead exists,
	// and then fails with ErrNoticeExists.
	Write(ctx context.Context, n Notice) error
	// MarkEmitted records that Emit took n (the notice with n's event id
	// only), so that no later pass emits it again.
	MarkEmitted(ctx context.Context, n Notice) error
	// Of reads user's notices of buckets that expire after t, soonest
	// first, consistently.
	Of(ctx context.Context, user string, after time.Time) ([]Notice, error)
}

// ErrNoticeExists is Write's answer when the notice was already written,
// by this finder in an earlier pass or by another one.
var ErrNoticeExists = errors.New("notice already written")

// Emit hands a decided notice to the dispatcher. It may be called more
// than once for one notice (after a failure, or when two finders race), always
// with the same event: the dispatcher keeps one delivery per event id.
type Emit func(ctx context.Context, ev webhook.Event) error

// Options say how a Finder works; the zero value is the default.
type Options struct {
	Leads    []time.Duration  // how long before a bucket expires its notice goes; none: DefaultLead
	Interval time.Duration    // between passes; 0: 5 min (each pass reads every candidate's account)
	Shards   int              // the store's index shards; 0: 16
	LeaseTTL time.Duration    // of a shard's lease; 0: 1 min
	Owner    string           // the lease owner's name; "": shardpass.DefaultOwner (the host, the pid and a random suffix)
	Workers  int              // users looked at at once; 0: 8
	Now      func() time.Time // the clock that says what is due; nil: time.Now
	Log      *slog.Logger     // nil: slog.Default()
	Observer Observer         // hooks for metrics; each may be nil
}

// Observer is told what finding notices does, for metrics.
type Observer struct {
	// Decided counts a notice decided (written once), by its event type.
	Decided func(t ledger.EventType)
	// EmitFailed counts an Emit that failed (a later pass emits it again).
	EmitFailed func(t ledger.EventType)
}

// DefaultInterval is the time between passes when none is configured.
const DefaultInterval = 5 * time.Minute

// Progress is what finding notices has done.
type Progress struct {
	Passes      int64         `json:"passes"`
	Shards      int64         `json:"shards"`
	Candidates  int64         `json:"candidates"`   // users the index nominated
	Decided     int64         `json:"decided"`      // notices written
	Emitted     int64         `json:"emitted"`      // Emit calls that returned nil, retries included
	Retried     int64         `json:"retried"`      // Emits tried again, of notices an earlier Emit failed
	EmitsFailed int64         `json:"emits_failed"` // Emit calls that failed: a later pass emits them again
	Duration    time.Duration `json:"duration"`     // spent on passes
}

func (p Progress) String() string {
	return fmt.Sprintf("%d passes, %d shards, %d candidates, %d notices decided, %d emitted (%d retries), %d emits failed",
		p.Passes, p.Shards, p.Candidates, p.Decided, p.Emitted, p.Retried, p.EmitsFailed)
}

func (p *Progress) add(q Progress) {
	p.Passes, p.Shards, p.Candidates = p.Passes+q.Passes, p.Shards+q.Shards, p.Candidates+q.Candidates
	p.Decided, p.Emitted, p.Retried, p.EmitsFailed = p.Decided+q.Decided, p.Emitted+q.Emitted, p.Retried+q.Retried, p.EmitsFailed+q.EmitsFailed
	p.Duration += q.Duration
}

// Leases share the index's shards between finders, as between sweepers:
// the lease table's Lock (projection.LeaseTable in ledgerd).
type Leases = shardpass.Leases

// Finder decides the points.expiring notices and hands them to Emit.
type Finder struct {
	store   Store
	notices Notices
	pass    *shardpass.Pass
	o       Options
}

// New returns a Finder of store's users, keeping its notices in notices and
// sharing the index's shards by leases in leases. It refuses leads that
// are not positive or are named twice.
func New(store Store, notices Notices, leases Leases, o Options) (*Finder, error) {
	leads, err := checkLeads(o.Leads)
	if err != nil {
		return nil, err
	}
	o.Leads = leads
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	pass := shardpass.New(leases, leaseKey, shardpass.Options{
		Shards: o.Shards, LeaseTTL: o.LeaseTTL, Owner: o.Owner, Workers: o.Workers, Log: o.Log, Name: "notices"})
	return &Finder{store: store, notices: notices, pass: pass, o: o}, nil
}

// leaseKey names a shard's lease in the lease table.
func leaseKey(shard int) string { return fmt.Sprintf("NOTICE#%02d", shard) }

// Pass looks once at every shard no other finder holds: it decides the
// notices due, emits them, and emits again those an earlier Emit failed.
// A failed Emit does not stop the pass (it is counted, and the first such
// error returned after it); a failed read or write of a table does.
func (f *Finder) Pass(ctx context.Context, emit Emit) (Progress, error) {
	start := time.Now()
	p := Progress{Passes: 1}
	var emitErr error
	var mu sync.Mutex
	shards, err := f.pass.Run(ctx, func(shard int) shardpass.Shard {
		now := f.o.Now()
		return shardpass.Shard{
			// The index holds each user's next expiry only, which is never
			// after any of their buckets': every user with a bucket within
			// the longest lead is among these, whichever bucket is next.
			Due: func(ctx context.Context, fn func(string) error) error {
				return f.store.DueUsers(ctx, shard, now.Add(f.o.Leads[len(f.o.Leads)-1]), fn)
			},
			Each: func(ctx context.Context, user string) error {
				q, eerr, err := f.user(ctx, user, now, emit)
				if err != nil {
					return fmt.Errorf("notices of %q: %w", user, err)
				}
				mu.Lock()
				defer mu.Unlock()
				q.Candidates = 1
				p.add(q)
				if emitErr == nil {
					emitErr = eerr
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
	if emitErr != nil {
		return p, fmt.Errorf("%d notices not emitted, a later pass emits them again; first: %w", p.EmitsFailed, emitErr)
	}
	return p, nil
}

// user decides and emits one user's notices at now. emitErr is the first
// Emit that failed; err a read or write that did.
func (f *Finder) user(ctx context.Context, user string, now time.Time, emit Emit) (p Progress, emitErr, err error) {
	a, err := f.store.Balance(ctx, user)
	if err != nil {
		return p, nil, err
	}
	if !hasNoticeable(a, now, f.o.Leads) {
		return p, nil, nil // nominated by a hold, or nothing live within a lead
	}
	have, err := f.notices.Of(ctx, user, now)
	if err != nil {
		return p, nil, err
	}
	decide, retry := plan(a, now, f.o.Leads, have, func() string {
		return ulid.MustNew(ulid.Timestamp(now), ulid.DefaultEntropy()).String()
	})
	send := func(n Notice) error {
		if err := emit(ctx, n.Event); err != nil {
			p.EmitsFailed++
			if f.o.Observer.EmitFailed != nil {
				f.o.Observer.EmitFailed(n.Event.Type)
			}
			f.o.Log.WarnContext(ctx, "notices: emit failed; a later pass emits it again",
				"user_id", user, "event_id", n.Event.ID, "expire_time", n.Expire, "lead", n.Lead, "error", err)
			if emitErr == nil {
				emitErr = err
			}
			return nil
		}
		p.Emitted++
		return f.notices.MarkEmitted(ctx, n)
	}
	for _, n := range retry {
		p.Retried++
		if err := send(n); err != nil {
			return p, emitErr, err
		}
	}
	for _, n := range decide {
		err := f.notices.Write(ctx, n)
		if errors.Is(err, ErrNoticeExists) {
			continue // another finder decided it first, and emits it
		}
		if err != nil {
			return p, emitErr, err
		}
		p.Decided++
		if f.o.Observer.Decided != nil {
			f.o.Observer.Decided(n.Event.Type)
		}
		if err := send(n); err != nil {
			return p, emitErr, err
		}
	}
	return p, emitErr, nil
}

// hasNoticeable says whether a holds points live at now in a bucket
// within the longest lead, so that its notices are worth reading.
func hasNoticeable(a ledger.Account, now time.Time, leads []time.Duration) bool {
	for _, b := range a.At(now).Buckets {
		if !b.Expire.IsZero() && b.Amount.IsPositive() && b.Expire.Sub(now) <= leads[len(leads)-1] {
			return true
		}
	}
	return false
}

// Run passes every Interval until ctx ends, logging what each pass
// decided, and the totals every hour. A failed pass is logged and tried
// again at the next.
func (f *Finder) Run(ctx context.Context, emit Emit) error {
	var total Progress
	lastReport := time.Now()
	for ctx.Err() == nil { // stopped is not an error
		p, err := f.Pass(ctx, emit)
		total.add(p)
		switch {
		case err != nil:
			f.o.Log.WarnContext(ctx, "notices: pass failed; trying again at the next", "error", err)
		case p.Decided > 0 || p.Retried > 0:
			f.o.Log.InfoContext(ctx, "notices: points.expiring decided", "candidates", p.Candidates,
				"decided", p.Decided, "emitted", p.Emitted, "retried", p.Retried, "duration", p.Duration)
		}
		if time.Since(lastReport) >= time.Hour {
			f.o.Log.InfoContext(ctx, "notices: totals", "progress", total.String())
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
		case <-time.After(f.o.Interval):
		}
	}
	return nil
}

// ParseLeads reads a list of leads as a flag gives it: comma-separated,
// each a whole number of days ("7d") or a Go duration ("36h"), such as
// "7d,1d". It checks them as New does.
func ParseLeads(s string) ([]time.Duration, error) {
	var leads []time.Duration
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		var lead time.Duration
		if days, ok := strings.CutSuffix(part, "d"); ok {
			n, err := strconv.Atoi(days)
			if err != nil || n > 100*365 {
				return nil, fmt.Errorf("notice leads: %q is not a number of days", part)
			}
			lead = time.Duration(n) * 24 * time.Hour
		} else {
			var err error
			if lead, err = time.ParseDuration(part); err != nil {
				return nil, fmt.Errorf("notice leads: %q is neither days (7d) nor a duration (36h)", part)
			}
		}
		leads = append(leads, lead)
	}
	if _, err := checkLeads(leads); err != nil {
		return nil, err
	}
	return leads, nil
}
