package client

import (
	"testing"
	"time"
)

func TestBackoffIsJitteredUnderAGrowingCeiling(t *testing.T) {
	t.Parallel()
	p := RetryPolicy{InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}.withDefaults()
	for _, tc := range []struct {
		retry   int
		ceiling time.Duration
	}{{1, 100 * time.Millisecond}, {2, 200 * time.Millisecond}, {4, 800 * time.Millisecond}, {5, time.Second}, {64, time.Second}} {
		var most time.Duration
		for range 1000 {
			d := p.backoff(tc.retry)
			if d < 0 || d > tc.ceiling {
				t.Fatalf("backoff before retry %d = %v, want in [0, %v]", tc.retry, d, tc.ceiling)
			}
			most = max(most, d)
		}
		if most < tc.ceiling/2 {
			t.Errorf("backoff before retry %d: at most %v in 1000 draws, want some near %v", tc.retry, most, tc.ceiling)
		}
	}
}
