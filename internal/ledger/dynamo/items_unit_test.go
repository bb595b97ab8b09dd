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

// TestFormatTimeIsTheLayout: the hand-written formatTime writes what
// time.Format writes with timeLayout, for times across the years the
// layout holds, every zone, the microsecond's edges and the zero time.
func TestFormatTimeIsTheLayout(t *testing.T) {
	r := rand.New(rand.NewSource(37))
	zones := []*time.Location{time.UTC, time.FixedZone("east", 14*3600), time.FixedZone("west", -12*3600-30*60)}
	times := []time.Time{{}, time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC), time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 11, 28, 10, 0, 0, 999, time.UTC), time.Date(2026, 2, 28, 23, 59, 59, 1000, time.FixedZone("x", -3600)),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)}
	for range 20000 {
		times = append(times, time.Unix(r.Int63n(253402300799), r.Int63n(1e9)).In(zones[r.Intn(len(zones))]))
	}
	for _, tm := range times {
		if got, want := formatTime(tm), tm.UTC().Format(timeLayout); got != want {
			t.Fatalf("formatTime(%v) = %q, time.Format writes %q", tm, got, want)
		}
	}
}
