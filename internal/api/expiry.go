package api

import (
	"cmp"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/ledger"
)

// ExpiryPolicy is the program's rules for when granted points expire.
type ExpiryPolicy struct {
	// DefaultTTL is how long points of a grant that names no expiry live;
	// 0: they never expire. It does not apply to adjustments.
	DefaultTTL time.Duration
	// Max is how far ahead an expiry may be; 0: DefaultMaxExpiry.
	Max time.Duration
	// HoldTTL is how long a hold that names no expiry holds; 0:
	// DefaultHoldTTL.
	HoldTTL time.Duration
	// HoldMax is how far ahead a hold may expire; 0: DefaultMaxHoldTTL.
	HoldMax time.Duration
	// EffectiveMax is how far ahead a credit's points may become
	// spendable; 0: DefaultMaxEffectiveDelay.
	EffectiveMax time.Duration
	// Now is the clock an expiry is judged by.
	Now func() time.Time
}

// DefaultMaxExpiry bounds how far ahead points may expire by default.
const DefaultMaxExpiry = 10 * 365 * 24 * time.Hour

// DefaultHoldTTL is how long a checkout holds points when it does not say:
// long enough to pay, short enough that an abandoned cart gives its points
// back the same hour.
const DefaultHoldTTL = 15 * time.Minute

// DefaultMaxHoldTTL bounds how long a hold may hold points by default.
const DefaultMaxHoldTTL = 7 * 24 * time.Hour

// DefaultMaxEffectiveDelay bounds how long points may stay pending by
// default: longer than any return window, short enough that a typo of a
// year is refused.
const DefaultMaxEffectiveDelay = 180 * 24 * time.Hour

func (p ExpiryPolicy) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// effective resolves a credit's effective_time or effective_delay (not
// both) to when its points become spendable; zero: at once. In the past
// (or now), or beyond EffectiveMax, is INVALID_EFFECTIVE_TIME. spec is
// what the request said, as expire's is.
func (p ExpiryPolicy) effective(at *timestamppb.Timestamp, delay *durationpb.Duration) (effective time.Time, spec string, err error) {
	invalid := func(format string, args ...any) (time.Time, string, error) {
		return time.Time{}, "", ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidEffectiveTime, format, args...)
	}
	t := p.now()
	switch {
	case at != nil && delay != nil:
		return invalid("effective_time and effective_delay exclude each other")
	case at != nil:
		if err := at.CheckValid(); err != nil {
			return invalid("effective_time: %v", err)
		}
		effective = at.AsTime()
		spec = "at " + effective.UTC().Format(time.RFC3339Nano)
	case delay != nil:
		if err := delay.CheckValid(); err != nil {
			return invalid("effective_delay: %v", err)
		}
		effective = t.Add(delay.AsDuration())
		spec = "delay " + delay.AsDuration().String()
	default:
		return time.Time{}, "", nil
	}
	max := cmp.Or(p.EffectiveMax, DefaultMaxEffectiveDelay)
	switch {
	case !effective.After(t):
		return invalid("effective time %s is not in the future", effective.UTC().Format(time.RFC3339Nano))
	case effective.Sub(t) > max:
		return invalid("effective time %s is more than %s ahead", effective.UTC().Format(time.RFC3339Nano), max)
	}
	return effective.UTC().Truncate(time.Microsecond), spec, nil
}

// creditTimes resolves a credit's effective time, then its expiry counted
// from it: a pending credit's ttl (or the default one) starts when its
// points become spendable, and its expiry's maximum is counted from then.
func (p ExpiryPolicy) creditTimes(expireAt *timestamppb.Timestamp, ttl *durationpb.Duration, effectiveAt *timestamppb.Timestamp, delay *durationpb.Duration, isGrant bool) (ledger.Request, error) {
	effective, effectiveSpec, err := p.effective(effectiveAt, delay)
	if err != nil {
		return ledger.Request{}, err
	}
	if !effective.IsZero() {
		p.Now = func() time.Time { return effective }
	}
	expire, expireSpec, err := p.expire(expireAt, ttl, isGrant)
	if e, ok := ledger.AsError(err); ok && !effective.IsZero() {
		return ledger.Request{}, ledger.Errorf(e.Kind, e.Reason, "counted from effective time %s: %s", effective.Format(time.RFC3339Nano), e.Message)
	}
	if err != nil {
		return ledger.Request{}, err
	}
	return ledger.Request{Expire: expire, ExpireSpec: expireSpec, Effective: effective, EffectiveSpec: effectiveSpec}, nil
}

// holdExpire resolves a hold's expire_time or ttl as expire does a grant's,
// with the hold's default and maximum: a hold always expires.
func (p ExpiryPolicy) holdExpire(at *timestamppb.Timestamp, ttl *durationpb.Duration) (time.Time, string, error) {
	p.DefaultTTL, p.Max = p.HoldTTL, p.HoldMax
	if p.DefaultTTL <= 0 {
		p.DefaultTTL = DefaultHoldTTL
	}
	if p.Max <= 0 {
		p.Max = DefaultMaxHoldTTL
	}
	return p.expire(at, ttl, true)
}

// expire resolves a credit's expire_time or ttl (not both) to the time its
// points expire; zero: never. A time in the past or beyond the maximum is
// INVALID_EXPIRY. A grant that names neither gets the default TTL.
//
// spec is what the request said, which its idempotency hash covers: a ttl
// is "ttl 3600s" whenever it is resolved, so that a retry hashes alike;
// nothing said is "" (the default then applies anew, and a retry replays
// the original).
func (p ExpiryPolicy) expire(at *timestamppb.Timestamp, ttl *durationpb.Duration, isGrant bool) (expire time.Time, spec string, err error) {
	invalid := func(format string, args ...any) (time.Time, string, error) {
		return time.Time{}, "", ledger.Errorf(ledger.KindInvalid, ledger.ReasonInvalidExpiry, format, args...)
	}
	t := p.now()
	switch {
	case at != nil && ttl != nil:
		return invalid("expire_time and ttl exclude each other")
	case at != nil:
		if err := at.CheckValid(); err != nil {
			return invalid("expire_time: %v", err)
		}
		expire = at.AsTime()
		spec = "at " + expire.UTC().Format(time.RFC3339Nano)
	case ttl != nil:
		if err := ttl.CheckValid(); err != nil {
			return invalid("ttl: %v", err)
		}
		if ttl.AsDuration() <= 0 {
			return invalid("ttl must be positive")
		}
		expire = t.Add(ttl.AsDuration())
		spec = "ttl " + ttl.AsDuration().String()
	case isGrant && p.DefaultTTL > 0:
		expire = t.Add(p.DefaultTTL)
		spec = "default"
	default:
		return time.Time{}, "", nil
	}
	max := DefaultMaxExpiry
	if p.Max > 0 {
		max = p.Max
	}
	switch {
	case !expire.After(t):
		return invalid("expire_time %s is not in the future", expire.UTC().Format(time.RFC3339Nano))
	case expire.Sub(t) > max:
		return invalid("expire_time %s is more than %s ahead", expire.UTC().Format(time.RFC3339Nano), max)
	}
	// The store keeps microseconds: an expiry is the one it keeps.
	return expire.UTC().Truncate(time.Microsecond), spec, nil
}

func drawsToProto(ds []ledger.Draw) []*pb.Draw {
	out := make([]*pb.Draw, len(ds))
	for i, d := range ds {
		out[i] = &pb.Draw{ExpireTime: timeToProto(d.Expire), Amount: d.Amount.String(), Kind: ledger.KindName(d.Kind)}
	}
	return out
}

func bucketsToProto(bs []ledger.Bucket) []*pb.Bucket {
	out := make([]*pb.Bucket, len(bs))
	for i, b := range bs {
		out[i] = &pb.Bucket{ExpireTime: timeToProto(b.Expire), Amount: b.Amount.String(), Kind: ledger.KindName(b.Kind)}
	}
	return out
}

// timeToProto is t, or nil (unset) for the zero time: never.
func timeToProto(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}
