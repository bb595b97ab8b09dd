package webhook

import (
	"testing"
	"time"
)

func fixed(r float64) func() float64 { return func() float64 { return r } }

func TestNextAttemptFollowsTheSchedule(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 25, 15, 0, 0, 0, time.UTC)
	// Seven delays, each ±20%.
	s := Schedule{Delays: []time.Duration{
		5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour,
	}, Jitter: 0.2}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	if next, giveUp := s.NextAttempt(0, now, fixed(0.9)); giveUp || !next.Equal(now) {
		t.Errorf("before any attempt: %s, %v; want now", next, giveUp)
	}
	for i, d := range s.Delays {
		attempts := i + 1
		// random 0.5 is the delay itself; 0 and just under 1, its bounds.
		if next, giveUp := s.NextAttempt(attempts, now, fixed(0.5)); giveUp || next.Sub(now) != d {
			t.Errorf("after %d attempts: in %s (give up %v), want %s", attempts, next.Sub(now), giveUp, d)
		}
		low, _ := s.NextAttempt(attempts, now, fixed(0))
		high, _ := s.NextAttempt(attempts, now, fixed(0.999999))
		if wantLow := time.Duration(float64(d) * 0.8); low.Sub(now) != wantLow {
			t.Errorf("after %d attempts, random 0: in %s, want %s", attempts, low.Sub(now), wantLow)
		}
		if hi := high.Sub(now); hi <= d || hi > time.Duration(float64(d)*1.2) {
			t.Errorf("after %d attempts, random ~1: in %s, want in (%s, %s]", attempts, hi, d, time.Duration(float64(d)*1.2))
		}
	}
	if s.Attempts() != 8 {
		t.Errorf("Attempts() = %d, want 8", s.Attempts())
	}
	for _, attempts := range []int{8, 9, 100} {
		if next, giveUp := s.NextAttempt(attempts, now, fixed(0.5)); !giveUp || !next.IsZero() {
			t.Errorf("after %d attempts: %s, give up %v; want given up", attempts, next, giveUp)
		}
	}
}

func TestScheduleIsConfigurable(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 25, 15, 0, 0, 0, time.UTC)
	s := Schedule{Delays: []time.Duration{time.Second, time.Minute}}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	for r := 0.0; r < 1; r += 0.25 {
		if next, giveUp := s.NextAttempt(2, now, fixed(r)); giveUp || next.Sub(now) != time.Minute {
			t.Errorf("no jitter, random %v: in %s, want exactly 1m", r, next.Sub(now))
		}
	}
	if _, giveUp := s.NextAttempt(3, now, fixed(0.5)); !giveUp {
		t.Error("a 2-delay schedule goes on after 3 attempts")
	}
	for _, bad := range []Schedule{
		{},
		{Delays: []time.Duration{time.Second, 0}},
		{Delays: []time.Duration{-time.Second}},
		{Delays: []time.Duration{time.Second}, Jitter: 1},
		{Delays: []time.Duration{time.Second}, Jitter: -0.1},
	} {
		if err := bad.Check(); err == nil {
			t.Errorf("Check(%+v) accepted it", bad)
		}
	}
}
