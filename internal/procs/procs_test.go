package procs

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// script drives a Fitter window by window: each window the process uses
// the CPUs given, on a clock of the test's own (no timing involved).
type script struct {
	t    *testing.T
	f    *Fitter
	now  time.Time
	cpu  time.Duration
	sets []int
}

func newScript(t *testing.T, start, maxProcs int) *script {
	s := &script{t: t, now: time.Unix(1_700_000_000, 0)}
	s.f = New(Options{Max: maxProcs, Interval: 50 * time.Millisecond, ShrinkAfter: 4,
		CPUTime: func() time.Duration { return s.cpu },
		Set:     func(n int) { s.sets = append(s.sets, n) }})
	s.f.cur = start
	s.f.Step(s.now)
	return s
}

// window ends a 50 ms window in which the process used `used` CPUs and
// returns the processors after it.
func (s *script) window(used float64) int {
	s.now = s.now.Add(50 * time.Millisecond)
	s.cpu += time.Duration(used * float64(50*time.Millisecond))
	s.f.Step(s.now)
	return s.f.Procs()
}

func TestAddsProcessorsTheWindowAfterTheLoadNeedsThem(t *testing.T) {
	s := newScript(t, 1, 8)
	if got := s.window(0.3); got != 1 {
		t.Fatalf("0.3 of a CPU on one processor: %d processors, want 1", got)
	}
	// One processor saturated: the next window has two.
	if got := s.window(1.0); got != 2 {
		t.Fatalf("one processor saturated: %d processors, want 2", got)
	}
	// Two saturated: four, at once.
	if got := s.window(2.0); got != 4 {
		t.Fatalf("two processors saturated: %d processors, want 4", got)
	}
	// Never past Max.
	if got := s.window(7.9); got != 8 {
		t.Fatalf("7.9 CPUs used with a Max of 8: %d processors, want 8", got)
	}
	if !slices.Equal(s.sets, []int{2, 4, 8}) {
		t.Fatalf("GOMAXPROCS set to %v, want [2 4 8]", s.sets)
	}
}

func TestTakesProcessorsAwayOnlyAfterALastingLull(t *testing.T) {
	s := newScript(t, 4, 8)
	// Three quiet windows (ShrinkAfter is 4), then a busy one: the lull
	// starts over, and nothing is taken away.
	for range 3 {
		if got := s.window(0.2); got != 4 {
			t.Fatalf("during a short lull: %d processors, want 4 kept", got)
		}
	}
	if got := s.window(1.9); got != 4 {
		t.Fatalf("a window wanting 4 in the lull: %d processors, want 4", got)
	}
	// Four quiet windows in a row, the busiest wanting 2 (0.7 CPU): two.
	for i, used := range []float64{0.2, 0.7, 0.1, 0.3} {
		got := s.window(used)
		want := 4
		if i == 3 {
			want = 2
		}
		if got != want {
			t.Fatalf("lull window %d: %d processors, want %d", i, got, want)
		}
	}
	// And down to one after another lasting lull.
	for range 4 {
		s.window(0.1)
	}
	if got := s.f.Procs(); got != 1 {
		t.Fatalf("after a second lull: %d processors, want 1", got)
	}
	if !slices.Equal(s.sets, []int{2, 1}) {
		t.Fatalf("GOMAXPROCS set to %v, want [2 1]", s.sets)
	}
}

func TestNeverFewerThanOneProcessor(t *testing.T) {
	s := newScript(t, 2, 2)
	for range 10 {
		s.window(0)
	}
	if got := s.f.Procs(); got != 1 {
		t.Fatalf("an idle process: %d processors, want 1", got)
	}
}

// TestRunSetsTheProcessorsAndGivesThemBack runs the real loop on the
// process's own CPU time and runtime.GOMAXPROCS: this test's process,
// idle, is fitted down to one processor, and given its processors back
// when the context ends. It asserts nothing about how long that takes.
func TestRunSetsTheProcessorsAndGivesThemBack(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	if before < 2 {
		t.Skip("one CPU: nothing to fit")
	}
	defer runtime.GOMAXPROCS(before)
	var mu sync.Mutex
	var seen [][2]int // each change: the processors set, GOMAXPROCS right after
	changed := make(chan struct{}, 1)
	f := New(Options{Interval: 10 * time.Millisecond, ShrinkAfter: 2,
		Changed: func(_, to int, _ float64) {
			mu.Lock()
			seen = append(seen, [2]int{to, runtime.GOMAXPROCS(0)})
			mu.Unlock()
			select {
			case changed <- struct{}{}:
			default:
			}
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.Run(ctx); close(done) }()
	for range changed {
		mu.Lock()
		one := slices.ContainsFunc(seen, func(c [2]int) bool { return c[0] == 1 })
		mu.Unlock()
		if one {
			break
		}
	}
	cancel()
	<-done
	for _, c := range seen {
		if c[0] != c[1] {
			t.Fatalf("the Fitter set %d processors, and GOMAXPROCS was %d right after", c[0], c[1])
		}
	}
	if got := runtime.GOMAXPROCS(0); got != before {
		t.Fatalf("GOMAXPROCS %d after Run returned, want %d back", got, before)
	}
}
