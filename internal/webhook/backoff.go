package webhook

import (
	"errors"
	"fmt"
	"time"
)

// Schedule is when a failed delivery is tried again: Delays[i] after
// attempt i+1 failed, each moved by up to ±Jitter of itself so that the
// retries of many events failed together do not come back together. After
// the attempt that has no delay left, the event is given up.
type Schedule struct {
	Delays []time.Duration
	Jitter float64 // 0 to <1: the fraction of a delay drawn at random
}

// Check refuses a schedule the dispatcher could not follow.
func (s Schedule) Check() error {
	if len(s.Delays) == 0 {
		return errors.New("retry schedule: no delays: an event would get one attempt")
	}
	for i, d := range s.Delays {
		if d <= 0 {
			return fmt.Errorf("retry schedule: delay %d is %s, want more than 0", i+1, d)
		}
	}
	if s.Jitter < 0 || s.Jitter >= 1 {
		return fmt.Errorf("retry schedule: jitter %v, want 0 to less than 1", s.Jitter)
	}
	return nil
}

// Attempts is how many attempts an event gets before it is given up.
func (s Schedule) Attempts() int { return len(s.Delays) + 1 }

// NextAttempt says when to try again after attempts attempts failed, the
// last of them at now: the delay for that attempt, jittered by random (a
// number in [0, 1), as math/rand/v2's Float64 draws). giveUp is true when
// attempts has used the schedule up: the event is FAILED. No attempt yet
// (attempts 0) is now.
func (s Schedule) NextAttempt(attempts int, now time.Time, random func() float64) (next time.Time, giveUp bool) {
	if attempts <= 0 {
		return now, false
	}
	if attempts > len(s.Delays) {
		return time.Time{}, true
	}
	d := s.Delays[attempts-1]
	// From d(1-Jitter) to d(1+Jitter), d itself at random 0.5.
	factor := 1 + s.Jitter*(2*random()-1)
	return now.Add(time.Duration(float64(d) * factor)), false
}
