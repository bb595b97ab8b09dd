// Package procs fits the Go scheduler's processors (GOMAXPROCS) to the CPU
// a process uses (ledgerd serve, issue 37).
//
// Why: the runtime starts with a processor for every CPU it may use. In a
// process that serves many small requests and waits on the network between
// them, most of those processors are idle most of the time, and each
// goroutine the network wakes makes the runtime wake an idle processor's
// thread to look for work (a futex call), which spins, finds none and goes
// back to sleep (another). Profiled under the load test's uniform scenario,
// ledgerd busy 0.23 of a CPU with two processors: the scheduler's wake-ups,
// spinning and sleeps were about a sixth of its CPU, and with one processor
// its CPU a purchase fell by a fifth at the same throughput
// (docs/performance.md, "Fitting GOMAXPROCS").
//
// A Fitter looks at the process's CPU time every Interval and keeps the
// processors at what it used, with room: enough processors that each is
// busy at most half the time (Target), at least one, at most Max. It adds
// processors at once, the window after the process used more than that
// (from one processor saturated to two, two to four); it takes them away
// only after the process has wanted fewer for ShrinkAfter windows in a row,
// and then to the most it wanted in those windows, so that a load that
// comes and goes does not make it change back and forth. Changing
// GOMAXPROCS stops the world for a moment (microseconds with few
// goroutines), which it does only when the count changes.
//
// What it costs: when load jumps, up to one Interval (50 ms) with the
// processors of the lighter load before they are added; a process that
// wants its processors fixed sets GOMAXPROCS (serve then does not fit
// them) or turns the fitting off (-fit-procs=false).
package procs

import (
	"context"
	"math"
	"runtime"
	"syscall"
	"time"
)

// Defaults of a Fitter's Options.
const (
	DefaultInterval    = 50 * time.Millisecond
	DefaultShrinkAfter = 20 // windows: a second at DefaultInterval
	DefaultTarget      = 0.5
)

// Options say how a Fitter fits. Every field has a default.
type Options struct {
	Max         int                  // the most processors; 0: runtime.GOMAXPROCS(0) when the Fitter is made
	Interval    time.Duration        // the window the CPU used is counted over; 0: DefaultInterval
	ShrinkAfter int                  // windows in a row wanting fewer before they are taken away; 0: DefaultShrinkAfter
	Target      float64              // the share of its time each processor may be busy; 0: DefaultTarget
	CPUTime     func() time.Duration // the process's CPU time so far (user and system); nil: getrusage
	Set         func(n int)          // sets the processors; nil: runtime.GOMAXPROCS
	Changed     func(from, to int, used float64)
}

// Fitter fits the processors to the CPU used; Run runs it.
type Fitter struct {
	o Options

	cur       int           // the processors now
	lastWall  time.Time     // the start of the window
	lastCPU   time.Duration // the CPU time at that start
	quiet     int           // windows in a row that wanted fewer than cur
	quietWant int           // the most those windows wanted
}

// New makes a Fitter, which starts from the processors the process has.
func New(o Options) *Fitter {
	if o.Max <= 0 {
		o.Max = runtime.GOMAXPROCS(0)
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.ShrinkAfter <= 0 {
		o.ShrinkAfter = DefaultShrinkAfter
	}
	if o.Target <= 0 {
		o.Target = DefaultTarget
	}
	if o.CPUTime == nil {
		o.CPUTime = processCPUTime
	}
	if o.Set == nil {
		o.Set = func(n int) { runtime.GOMAXPROCS(n) }
	}
	return &Fitter{o: o, cur: min(runtime.GOMAXPROCS(0), o.Max)}
}

// Procs is the processors the Fitter last set (or found).
func (f *Fitter) Procs() int { return f.cur }

// Run fits every Interval until ctx is done, then gives the process back
// its Max processors.
func (f *Fitter) Run(ctx context.Context) {
	t := time.NewTicker(f.o.Interval)
	defer t.Stop()
	f.Step(time.Now())
	for {
		select {
		case <-ctx.Done():
			if f.cur != f.o.Max {
				f.o.Set(f.o.Max)
				f.cur = f.o.Max
			}
			return
		case now := <-t.C:
			f.Step(now)
		}
	}
}

// Step ends the window that started at the last Step, at now: it counts
// the CPUs the process used over it and sets the processors that use
// calls for. The first Step only starts a window.
func (f *Fitter) Step(now time.Time) {
	cpu := f.o.CPUTime()
	if f.lastWall.IsZero() {
		f.lastWall, f.lastCPU = now, cpu
		return
	}
	wall := now.Sub(f.lastWall)
	if wall <= 0 {
		return
	}
	used := float64(cpu-f.lastCPU) / float64(wall)
	f.lastWall, f.lastCPU = now, cpu
	next := f.next(used)
	if next != f.cur {
		from := f.cur
		f.o.Set(next)
		f.cur = next
		if f.o.Changed != nil {
			f.o.Changed(from, next, used)
		}
	}
}

// next is the policy: the processors after a window in which the process
// used `used` CPUs.
func (f *Fitter) next(used float64) int {
	want := min(max(int(math.Ceil(used/f.o.Target)), 1), f.o.Max)
	switch {
	case want > f.cur:
		f.quiet, f.quietWant = 0, 0
		return want
	case want == f.cur:
		f.quiet, f.quietWant = 0, 0
		return f.cur
	}
	f.quiet++
	f.quietWant = max(f.quietWant, want)
	if f.quiet < f.o.ShrinkAfter {
		return f.cur
	}
	next := f.quietWant
	f.quiet, f.quietWant = 0, 0
	return next
}

// processCPUTime is the CPU time of the whole process, every thread's,
// user and system.
func processCPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
