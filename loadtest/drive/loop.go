package drive

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// intendedKey carries, in an open loop, when the schedule meant to send a
// request: its latency counts from then (no coordinated omission).
type intendedKey struct{}

// ClosedLoop runs workers clients, each stepping the scenario again as soon
// as its last step is answered, for warmup + d.
func ClosedLoop(ctx context.Context, s Scenario, send Sender, workers int, warmup, d time.Duration, rec *Recorder, progress io.Writer) {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := stepUntil(ctx, runCtx, s, send, workers, rec)
	pace(ctx, warmup, d, rec, progress)
	cancel()
	done()
}

// stepUntil starts workers clients that step the scenario (their requests
// under ctx) until until ends, each again as soon as its last step is
// answered; done waits for them.
func stepUntil(ctx, until context.Context, s Scenario, send Sender, workers int, rec *Recorder) (done func()) {
	seed := uint64(time.Now().UnixNano())
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), seed))
			for until.Err() == nil {
				s.Step(ctx, rng, send)
				rec.stepDone(time.Now()) // counted only while rec measures
			}
		})
	}
	return wg.Wait
}

// OpenLoop warms the system up with a closed loop of warmers for warmup
// (a cold emulator is slow at first, and a schedule started on it would
// carry that backlog into the measurement), then starts a step every 1/rate
// seconds, whether or not the earlier ones were answered (at most
// maxInFlight at once), and measures for d after a second to settle. A
// step's latency counts from its scheduled time, and every step due in the
// measurement is measured, however late it is answered: a stalled system is
// charged for every request it kept waiting. Steps still unanswered drainMax
// after the measurement are cut off and counted as errors (not_answered, or
// not_sent for those still waiting for a slot).
func OpenLoop(ctx context.Context, s Scenario, send Sender, rate float64, maxInFlight, warmers int, warmup, d time.Duration, rec *Recorder, progress io.Writer) (late int64) {
	if warmup > 0 {
		warmCtx, stop := context.WithTimeout(ctx, warmup)
		stepUntil(ctx, warmCtx, s, send, warmers, rec)() // not measured: rec has not begun
		stop()
		warmup = time.Second
	}
	reqCtx, cutOff := context.WithCancel(ctx) // the steps' requests
	defer cutOff()
	interval := time.Duration(float64(time.Second) / rate)
	seed := uint64(time.Now().UnixNano())
	slots := make(chan struct{}, maxInFlight)
	var steps sync.WaitGroup
	var behind atomic.Int64
	scheduled := make(chan struct{})
	go func() {
		defer close(scheduled)
		start := time.Now()
		for i := int64(0); ; i++ {
			at := start.Add(time.Duration(i) * interval)
			if end := rec.endsAt(); !end.IsZero() && !at.Before(end) {
				return // the steps due in the measurement are all started
			}
			if wait := time.Until(at); wait > 0 {
				select {
				case <-reqCtx.Done():
					return
				case <-time.After(wait):
				}
			}
			select {
			case slots <- struct{}{}:
			case <-reqCtx.Done():
				// Cut off: this step and the rest due in the measurement
				// were never sent.
				for end := rec.endsAt(); at.Before(end); i++ {
					rec.record("step", Outcome{Code: "not_sent"}, time.Since(at), at)
					at = start.Add(time.Duration(i+1) * interval)
				}
				return
			}
			if time.Since(at) > interval {
				behind.Add(1)
			}
			steps.Go(func() {
				defer func() { <-slots }()
				rng := rand.New(rand.NewPCG(uint64(i), seed))
				s.Step(context.WithValue(reqCtx, intendedKey{}, at), rng, send)
				rec.stepDone(at)
			})
		}
	}()
	pace(ctx, warmup, d, rec, progress)
	select {
	case <-scheduled:
	case <-time.After(drainMax):
		cutOff()
		<-scheduled
	}
	answered := make(chan struct{})
	go func() { steps.Wait(); close(answered) }()
	select {
	case <-answered:
	case <-time.After(drainMax):
		cutOff() // their requests end with an error, and are counted
		<-answered
	}
	return behind.Load()
}

// drainMax is how long an open loop waits, after its measurement, for the
// steps that were due in it.
const drainMax = time.Minute

// terminal: progress goes to a terminal (else to a log).
var terminal = func() bool {
	fi, err := os.Stderr.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}()

// pace waits out the warm-up, measures for d (or until the scenario ends
// the measurement, Recorder.EndNow), and prints progress.
func pace(ctx context.Context, warmup, d time.Duration, rec *Recorder, progress io.Writer) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(warmup):
	}
	for _, f := range rec.onBegin {
		f()
	}
	rec.Measure(d)
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var lastOK int64
	for {
		ended := false
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-rec.ended:
			ended = true
		}
		elapsed := time.Since(start)
		ok, errs, p99 := rec.snapshot()
		line := fmt.Sprintf("  %3.0fs/%.0fs  ok %-8d %6d/s  errors %-6d p99 %.1fms", elapsed.Seconds(), d.Seconds(), ok, ok-lastOK, errs, p99)
		lastOK = ok
		if terminal {
			fmt.Fprintf(progress, "\r%s   ", line) // one line, rewritten
		} else if s := int(elapsed.Round(time.Second) / time.Second); s%5 == 0 {
			fmt.Fprintln(progress, line) // a log: a line every 5 s
		}
		if elapsed >= d || ended {
			for _, f := range rec.onEnd {
				f()
			}
			if terminal {
				fmt.Fprintln(progress)
			}
			if ended {
				fmt.Fprintf(progress, "  the scenario ended its measurement at %.1fs of %.0fs\n", elapsed.Seconds(), d.Seconds())
			}
			return
		}
	}
}

// NewSender sends with x and records each op in rec (latency) and b (what
// was sent and acknowledged). In an open loop, an op is measured from when
// its step was due, and placed in the measurement by that time; an op that
// a step sends after another's answer (sentAfterKey) is measured from when
// it was sent, its wait for the first one belonging to that one.
func NewSender(x Executor, rec *Recorder, b Book) Sender {
	return func(ctx context.Context, o Op) Outcome {
		sent := time.Now()
		due, open := ctx.Value(intendedKey{}).(time.Time)
		start := sent
		if open && ctx.Value(sentAfterKey{}) == nil {
			start = due
		}
		if b != nil {
			b.Sending(o)
		}
		out := x.Do(ctx, o)
		now := time.Now()
		at := now
		if open {
			at = due
		}
		rec.record(o.Kind, out, now.Sub(start), at)
		if b != nil {
			b.Answered(o, out)
		}
		return out
	}
}

// A Book keeps what a run sent and what came back, for the checks after
// it (package check's Book); a baseline's runs keep none.
type Book interface {
	Sending(o Op)
	Answered(o Op, out Outcome)
}

// sentAfterKey marks the ops a step sends once an earlier op of it was
// answered (double-spend's purchases, after their grant; a checkout's
// capture or void, after its authorization).
type sentAfterKey struct{}
