package notice

import (
	"context"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
)

// Follower decides at once the notices of buckets that would expire
// before the finder's next pass looks: a stream handler beside the
// dispatcher (issue 31: a grant with a 90 s ttl expired with no notice, as
// passes came every 5 minutes). Buckets further off are the passes'.
type Follower struct {
	f    *Finder
	emit Emit
}

// Follow returns the Follower of f, handing its notices to emit.
func (f *Finder) Follow(emit Emit) *Follower { return &Follower{f: f, emit: emit} }

// Apply looks, as of now, at every user of entries with an entry whose
// points expire within two intervals (the next pass may come a whole
// interval and its own duration from now), and decides and emits their
// notices as a pass would. A failed read or write is returned (the batch
// is applied again); a failed Emit is not (the next pass emits it again).
func (fl *Follower) Apply(ctx context.Context, entries []ledger.Entry) error {
	now := fl.f.o.Now()
	soon := now.Add(2 * fl.f.o.Interval)
	users := map[string]bool{}
	for _, e := range entries {
		if e.ExpireTime.IsZero() || !e.ExpireTime.Before(soon) || !ledger.EntryTypes[e.Type].Credit && e.Type != ledger.EntryAdjustment {
			continue
		}
		if users[e.UserID] {
			continue
		}
		users[e.UserID] = true
		p, emitErr, err := fl.f.user(ctx, e.UserID, now, fl.emit)
		if err != nil {
			return err
		}
		if emitErr != nil {
			fl.f.o.Log.WarnContext(ctx, "notices: a notice decided at its grant was not emitted; the next pass emits it", "user_id", e.UserID, "error", emitErr)
		}
		if p.Decided > 0 {
			fl.f.o.Log.InfoContext(ctx, "notices: points.expiring decided at the grant", "user_id", e.UserID,
				"decided", p.Decided, "expire_time", e.ExpireTime.Format(time.RFC3339))
		}
	}
	return nil
}
