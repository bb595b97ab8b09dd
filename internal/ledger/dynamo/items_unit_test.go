package dynamo

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// versionSK writes a key's version as fmt's %0*d does.
func TestVersionSKAsFmt(t *testing.T) {
	t.Parallel()
	for _, v := range []int64{0, 1, 9, 10, 12345, 99999999999, math.MaxInt64, -1, math.MinInt64} {
		for _, prefix := range []string{entryPrefix, holdPrefix} {
			if got, want := versionSK(prefix, v), fmt.Sprintf("%s%0*d", prefix, versionDigits, v); got != want {
				t.Errorf("versionSK(%q, %d) = %q, want %q", prefix, v, got, want)
			}
		}
	}
}

// newID gives the ids ulid.MustNew gives from the same entropy, increasing
// within a millisecond and across them.
func TestNewIDAsULID(t *testing.T) {
	t.Parallel()
	l := New(nil, Options{Entropy: rand.New(rand.NewSource(1))})
	want := ulid.Monotonic(rand.New(rand.NewSource(1)), 0)
	at := time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)
	last := ""
	for i := range 50 {
		t1 := at.Add(time.Duration(i/10) * time.Millisecond)
		got := l.newID(t1)
		if w := ulid.MustNew(ulid.Timestamp(t1), want).String(); got != w {
			t.Fatalf("id %d: %s, want %s", i, got, w)
		}
		if got <= last {
			t.Fatalf("id %d: %s after %s", i, got, last)
		}
		last = got
	}
}
