package auth

import (
	"math"
	"sync"
	"time"
)

// Limiter is a token bucket per caller: each identity may make Rate
// requests a second on average and Burst at once. A nil Limiter allows
// everything.
type Limiter struct {
	rate  float64
	burst float64
	now   func() time.Time

	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

// NewLimiter returns a limiter of rate requests a second with bursts of
// burst (at least 1; 0 means max(1, rate)), or nil when rate is 0 (off).
func NewLimiter(rate float64, burst int, now func() time.Time) *Limiter {
	if rate <= 0 {
		return nil
	}
	if now == nil {
		now = time.Now
	}
	b := float64(burst)
	if burst <= 0 {
		b = math.Max(1, math.Ceil(rate))
	}
	return &Limiter{rate: rate, burst: b, now: now, buckets: map[string]*bucket{}, lastSweep: now()}
}

// Allow takes one token of id's bucket, if there is one.
func (l *Limiter) Allow(id Identity) bool {
	if l == nil {
		return true
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	b, ok := l.buckets[id.key()]
	if !ok {
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[id.key()] = b
	}
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.tokens = math.Min(l.burst, b.tokens+dt*l.rate)
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// sweep forgets buckets that have refilled: a full bucket is the same as
// none, so memory stays bounded by the callers of the last minute or so.
func (l *Limiter) sweep(now time.Time) {
	if now.Sub(l.lastSweep) < time.Minute {
		return
	}
	l.lastSweep = now
	full := time.Duration(l.burst / l.rate * float64(time.Second))
	for k, b := range l.buckets {
		if now.Sub(b.last) >= full {
			delete(l.buckets, k)
		}
	}
}
