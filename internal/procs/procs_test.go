package procs

import (
	"context"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// script drives a Fitter window by window: each window the process uses
// the CPUs given, on a clock of the test's own (no timing involved).
type script struct {
	t     *testing.T
	f     *Fitter
	now   time.Time
	cpu   time.Duration
	known bool // whether CPUTime knows it
	sets  []int
}

func newScript(t *testing.T, start, maxProcs int) *script {
	s := &script{t: t, now: time.Unix(1_700_000_000, 0), known: true}
	s.f = New(Options{Max: maxProcs, Interval: 50 * time.Millisecond, ShrinkAfter: 4,
		CPUTime: func() (time.Duration, bool) { return s.cpu, s.known },
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

// TestALullCutShortByGrowthStartsOver: the windows of a lull before the
// processors were added do not count toward taking them away after.
func TestALullCutShortByGrowthStartsOver(t *testing.T) {
	s := newScript(t, 2, 8)
	for range 3 { // ShrinkAfter is 4
		s.window(0.1)
	}
	if got := s.window(1.9); got != 4 {
		t.Fatalf("two processors near saturation: %d processors, want 4", got)
	}
	for range 3 {
		if got := s.window(0.1); got != 4 {
			t.Fatalf("three quiet windows after growing: %d processors, want 4 kept", got)
		}
	}
	if got := s.window(0.1); got != 1 {
		t.Fatalf("the fourth quiet window: %d processors, want 1", got)
	}
}

// TestUnknownOrBackwardCPUTimeCountsForNothing: a window whose CPU time is
// unknown, or smaller than before, neither adds nor takes away processors,
// nor counts toward a lull, and the next window is measured afresh.
func TestUnknownOrBackwardCPUTimeCountsForNothing(t *testing.T) {
	s := newScript(t, 2, 8)
	for range 3 {
		s.window(0.1)
	}
	s.known = false
	s.window(0.1) // would be the lull's fourth
	s.known = true
	if got := s.window(5); got != 2 {
		t.Fatalf("the window after an unknown CPU time: %d processors, want 2 (it only starts a window)", got)
	}
	s.cpu -= time.Second // CPU time went back
	if got := s.window(0.1); got != 2 {
		t.Fatalf("a window whose CPU time went back: %d processors, want 2", got)
	}
	if len(s.sets) != 0 {
		t.Fatalf("GOMAXPROCS set to %v, want no change", s.sets)
	}
}

// TestAWindowTooShortIsLeftToGoOn: a Step less than half an Interval
// after the last one measures nothing; the window goes on.
func TestAWindowTooShortIsLeftToGoOn(t *testing.T) {
	s := newScript(t, 1, 8)
	s.now = s.now.Add(5 * time.Millisecond)
	s.cpu += 5 * time.Millisecond // a whole CPU, for 5 ms
	s.f.Step(s.now)
	if got := s.f.Procs(); got != 1 {
		t.Fatalf("after a 5 ms window: %d processors, want 1 (too short to count)", got)
	}
	// The window goes on to 55 ms with nothing more used: 5/55 of a CPU.
	if got := s.window(0); got != 1 {
		t.Fatalf("after the whole window: %d processors, want 1", got)
	}
}

// TestRunStartsAtMostMaxAndRestoresTheDefault: given a Max below the
// processors the process has, Run sets Max first; when it stops it gives
// the runtime its default back.
func TestRunStartsAtMostMaxAndRestoresTheDefault(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("one processor: Max 1 is no change")
	}
	var sets []int
	restored := false
	f := New(Options{Max: 1, CPUTime: func() (time.Duration, bool) { return 0, true },
		Set: func(n int) { sets = append(sets, n) }, Restore: func() { restored = true }})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f.Run(ctx)
	if !slices.Equal(sets, []int{1}) || !restored {
		t.Fatalf("sets %v, restored %v; want [1] and the default given back", sets, restored)
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
// idle, is fitted down to one processor, and given the runtime's default
// back when the context ends. It bounds the wait only to fail rather than
// hang (a minute for what takes a few windows).
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
	for one := false; !one; {
		select {
		case <-changed:
		case <-time.After(time.Minute):
			t.Fatal("no change to one processor in a minute of an idle process")
		}
		mu.Lock()
		one = slices.ContainsFunc(seen, func(c [2]int) bool { return c[0] == 1 })
		mu.Unlock()
	}
	cancel()
	<-done
	for _, c := range seen {
		if c[0] != c[1] {
			t.Fatalf("the Fitter set %d processors, and GOMAXPROCS was %d right after", c[0], c[1])
		}
	}
	// The runtime's default ignores a GOMAXPROCS in the environment.
	if got := runtime.GOMAXPROCS(0); os.Getenv("GOMAXPROCS") == "" && got != before {
		t.Fatalf("GOMAXPROCS %d after Run returned, want the default %d back", got, before)
	}
}
