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
// busy at most half the time (Target), at least one, at most Max (the
// runtime's default GOMAXPROCS when the Fitter is made: the CPUs the
// process may use, or its container's CPU limit then). It adds processors
// at the end of a window in which the process used more than that: busy
// processors show at most their own count in CPU, so the count at most
// doubles a window (one saturated becomes two, two four). It takes them
// away only after the process has wanted fewer for ShrinkAfter windows in
// a row, and then to the most it wanted in those windows, so that a load
// that comes and goes does not make it change back and forth. Changing
// GOMAXPROCS stops the world for a moment (microseconds with few
// goroutines), which it does only when the count changes.
//
// What it costs: when load jumps, the lighter load's processors until the
// window ends (up to 50 ms) and half as many as needed for each further
// window until there are enough (1 to 8 processors: three windows). Setting
// GOMAXPROCS turns off the runtime's own following of a container's CPU
// limit (Go 1.25): a limit changed while the Fitter runs is not seen until
// the process starts again; the Fitter gives the runtime its default back
// when it stops. A process that wants its processors fixed sets GOMAXPROCS
// (serve then does not fit them) or turns the fitting off
// (-fit-procs=false).
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
	Max         int                          // the most processors; 0: runtime.GOMAXPROCS(0) when the Fitter is made (the runtime's default, unless something set it)
	Interval    time.Duration                // the window the CPU used is counted over; 0: DefaultInterval
	ShrinkAfter int                          // windows in a row wanting fewer before they are taken away; 0: DefaultShrinkAfter
	Target      float64                      // the share of its time each processor may be busy; 0: DefaultTarget
	CPUTime     func() (time.Duration, bool) // the process's CPU time so far (user and system), false when unknown; nil: getrusage
	Set         func(n int)                  // sets the processors; nil: runtime.GOMAXPROCS
	Restore     func()                       // gives the runtime its default back when Run ends; nil: runtime.SetDefaultGOMAXPROCS
	Changed     func(from, to int, used float64)
}

// Fitter fits the processors to the CPU used; Run runs it. Its methods
// are for one goroutine: Procs and Step not while Run runs.
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
	if o.Restore == nil {
		o.Restore = runtime.SetDefaultGOMAXPROCS
	}
	return &Fitter{o: o, cur: min(runtime.GOMAXPROCS(0), o.Max)}
}

// Procs is the processors the Fitter last set (or found).
func (f *Fitter) Procs() int { return f.cur }

// Run fits every Interval until ctx is done, then gives the runtime its
// default GOMAXPROCS back.
func (f *Fitter) Run(ctx context.Context) {
	t := time.NewTicker(f.o.Interval)
	defer t.Stop()
	if f.cur != runtime.GOMAXPROCS(0) { // more than Max
		f.o.Set(f.cur)
	}
	f.Step(time.Now())
	for {
		select {
		case <-ctx.Done():
			f.o.Restore()
			return
		case <-t.C:
			// Now, not the tick's time: the CPU time is read now, and a
			// saturated process may read it well after the tick.
			f.Step(time.Now())
		}
	}
}

// Step ends the window that started at the last Step, at now: it counts
// the CPUs the process used over it and sets the processors that use
// calls for. The first Step only starts a window.
//
// A window shorter than half an Interval is left to go on (a late tick
// and the next one close behind it would count a short time's CPU as a
// rate); one whose CPU time is unknown, or went back, starts a new window
// and counts for nothing.
func (f *Fitter) Step(now time.Time) {
	cpu, ok := f.o.CPUTime()
	if !ok || f.lastWall.IsZero() || cpu < f.lastCPU {
		f.lastWall, f.lastCPU = now, cpu
		if !ok {
			f.lastWall = time.Time{}
		}
		return
	}
	wall := now.Sub(f.lastWall)
	if wall < f.o.Interval/2 {
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
// user and system; false when getrusage fails.
func processCPUTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
