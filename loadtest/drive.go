package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in microseconds, from 1 µs to 10 minutes, with 3
// significant digits.
const (
	hdrMin    = 1
	hdrMax    = int64(10 * time.Minute / time.Microsecond)
	hdrDigits = 3
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(hdrMin, hdrMax, hdrDigits) }

// recorder collects the outcomes of one run. Requests that complete before
// begin (the warm-up) or after end are not measured.
type recorder struct {
	mu         sync.Mutex
	begin, end time.Time
	onBegin    []func() // called when measuring begins, and ends
	onEnd      []func()
	all        *hdrhistogram.Histogram
	byOp       map[string]*hdrhistogram.Histogram
	seconds    []*second
	codes      map[string]int64
	codesByOp  map[string]map[string]int64
	purchases  int64 // acknowledged, replays left out
	mutations  int64 // acknowledged requests that write (op.mutates), replays left out
	steps      int64 // scenario steps completed
}

type second struct {
	ok, errors int64
	hist       *hdrhistogram.Histogram
}

func newRecorder() *recorder {
	return &recorder{all: newHist(), byOp: map[string]*hdrhistogram.Histogram{}, codes: map[string]int64{}, codesByOp: map[string]map[string]int64{}}
}

// measure starts measuring now, for d.
func (r *recorder) measure(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.begin = time.Now()
	r.end = r.begin.Add(d)
}

// record counts one request. at places it in the measurement: when it was
// answered (closed loop) or when it was due (open loop).
func (r *recorder) record(kind string, out outcome, latency time.Duration, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.begin.IsZero() || at.Before(r.begin) || !at.Before(r.end) {
		return
	}
	us := min(max(latency.Microseconds(), hdrMin), hdrMax)
	_ = r.all.RecordValue(us)
	h, ok := r.byOp[kind]
	if !ok {
		h = newHist()
		r.byOp[kind] = h
	}
	_ = h.RecordValue(us)
	r.codes[out.code]++
	if r.codesByOp[kind] == nil {
		r.codesByOp[kind] = map[string]int64{}
	}
	r.codesByOp[kind][out.code]++
	i := int(at.Sub(r.begin) / time.Second)
	for len(r.seconds) <= i {
		r.seconds = append(r.seconds, &second{hist: newHist()})
	}
	s := r.seconds[i]
	_ = s.hist.RecordValue(us)
	if out.code != "ok" {
		s.errors++
		return
	}
	s.ok++
	if out.replayed {
		return // a retry's answer: the purchase was counted when it was made
	}
	if kind == "purchase" {
		r.purchases++
	}
	if (op{kind: kind}).mutates() {
		r.mutations++
	}
}

// endsAt is when the measurement ends (zero before it begins).
func (r *recorder) endsAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.end
}

// stepDone counts a step of the scenario completed at at.
func (r *recorder) stepDone(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.begin.IsZero() && !at.Before(r.begin) && at.Before(r.end) {
		r.steps++
	}
}

// snapshot is for the progress line: requests, errors and the p99 so far.
func (r *recorder) snapshot() (ok, errs int64, p99 float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c, n := range r.codes {
		if c == "ok" {
			ok += n
		} else {
			errs += n
		}
	}
	return ok, errs, msOf(r.all.ValueAtQuantile(99))
}

// run summarises the recorder as a Run.
func (r *recorder) run() Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.end.Sub(r.begin).Seconds()
	run := Run{DurationS: d, Codes: map[string]int64{}, ByOp: map[string]Percentiles{},
		Latency: percentiles(r.all)}
	for c, n := range r.codes {
		run.Codes[c] = n
		run.Requests += n
	}
	run.OK = r.codes["ok"]
	run.Mutations = r.mutations
	if d > 0 {
		run.Throughput = float64(run.OK) / d
		run.Purchases = float64(r.purchases) / d
		run.Steps = float64(r.steps) / d
	}
	for k, h := range r.byOp {
		run.ByOp[k] = percentiles(h)
	}
	if len(r.codesByOp) > 1 {
		run.CodesByOp = map[string]map[string]int64{}
		for k, codes := range r.codesByOp {
			run.CodesByOp[k] = maps.Clone(codes)
		}
	}
	// Every second of the measurement, those in which nothing was answered
	// too (a stall at the end must show).
	for len(r.seconds) < int(math.Ceil(d)) {
		r.seconds = append(r.seconds, &second{hist: newHist()})
	}
	for i, s := range r.seconds {
		run.Timeline = append(run.Timeline, Second{T: float64(i), OK: s.ok, Errors: s.errors,
			P50: msOf(s.hist.ValueAtQuantile(50)), P99: msOf(s.hist.ValueAtQuantile(99))})
	}
	run.Histogram = buckets(r.all)
	if note := unsteady(run.Timeline[:int(d)]); note != "" { // whole seconds only
		run.Notes = append(run.Notes, note)
	}
	return run
}

// unsteady says so when the acknowledged requests per second of the last
// quarter of a run differ from the first quarter's by more than 15%: the run
// then measured a transition, most often DynamoDB Local still warming up (its
// JIT compiler takes tens of seconds, longer with one CPU), and its figure
// depends on the run's length. A longer -warmup measures the steady state.
func unsteady(tl []Second) string {
	q := len(tl) / 4
	if q < 2 {
		return ""
	}
	mean := func(ss []Second) float64 {
		var n int64
		for _, s := range ss {
			n += s.OK
		}
		return float64(n) / float64(len(ss))
	}
	first, last := mean(tl[:q]), mean(tl[len(tl)-q:])
	if first == last || first > 0 && math.Abs(last-first)/first <= 0.15 {
		return ""
	}
	return fmt.Sprintf("NOT STEADY: %.0f/s in the first quarter of the measurement, %.0f/s in the last (a longer -warmup measures the steady state)", first, last)
}

func msOf(us int64) float64 { return float64(us) / 1000 }

func percentiles(h *hdrhistogram.Histogram) Percentiles {
	if h.TotalCount() == 0 {
		return Percentiles{}
	}
	return Percentiles{Count: h.TotalCount(), Mean: h.Mean() / 1000,
		P50: msOf(h.ValueAtQuantile(50)), P90: msOf(h.ValueAtQuantile(90)), P99: msOf(h.ValueAtQuantile(99)),
		P999: msOf(h.ValueAtQuantile(99.9)), Max: msOf(h.Max())}
}

// buckets: four a doubling (2^(1/4) apart), from the smallest latency to the
// largest.
func buckets(h *hdrhistogram.Histogram) []Bucket {
	if h.TotalCount() == 0 {
		return nil
	}
	step := math.Pow(2, 0.25)
	var out []Bucket
	for upper := float64(h.Min()) * step; ; upper *= step {
		out = append(out, Bucket{UpperMS: upper / 1000})
		if upper >= float64(h.Max()) {
			break
		}
	}
	for _, b := range h.Distribution() {
		if b.Count == 0 {
			continue
		}
		i := 0
		for i < len(out)-1 && float64(b.To)/1000 > out[i].UpperMS {
			i++
		}
		out[i].Count += b.Count
	}
	return out
}

// intendedKey carries, in an open loop, when the schedule meant to send a
// request: its latency counts from then (no coordinated omission).
type intendedKey struct{}

// closedLoop runs workers clients, each stepping the scenario again as soon
// as its last step is answered, for warmup + d.
func closedLoop(ctx context.Context, s scenario, send sender, workers int, warmup, d time.Duration, rec *recorder, progress io.Writer) {
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
func stepUntil(ctx, until context.Context, s scenario, send sender, workers int, rec *recorder) (done func()) {
	seed := uint64(time.Now().UnixNano())
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), seed))
			for until.Err() == nil {
				s.step(ctx, rng, send)
				rec.stepDone(time.Now()) // counted only while rec measures
			}
		})
	}
	return wg.Wait
}

// openLoop warms the system up with a closed loop of warmers for warmup
// (a cold emulator is slow at first, and a schedule started on it would
// carry that backlog into the measurement), then starts a step every 1/rate
// seconds, whether or not the earlier ones were answered (at most
// maxInFlight at once), and measures for d after a second to settle. A
// step's latency counts from its scheduled time, and every step due in the
// measurement is measured, however late it is answered: a stalled system is
// charged for every request it kept waiting. Steps still unanswered drainMax
// after the measurement are cut off and counted as errors (not_answered, or
// not_sent for those still waiting for a slot).
func openLoop(ctx context.Context, s scenario, send sender, rate float64, maxInFlight, warmers int, warmup, d time.Duration, rec *recorder, progress io.Writer) (late int64) {
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
					rec.record("step", outcome{code: "not_sent"}, time.Since(at), at)
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
				s.step(context.WithValue(reqCtx, intendedKey{}, at), rng, send)
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

// pace waits out the warm-up, measures for d, and prints progress.
func pace(ctx context.Context, warmup, d time.Duration, rec *recorder, progress io.Writer) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(warmup):
	}
	for _, f := range rec.onBegin {
		f()
	}
	rec.measure(d)
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var lastOK int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
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
		if elapsed >= d {
			for _, f := range rec.onEnd {
				f()
			}
			if terminal {
				fmt.Fprintln(progress)
			}
			return
		}
	}
}

// newSender sends with x and records each op in rec (latency) and b (what
// was sent and acknowledged). In an open loop, an op is measured from when
// its step was due, and placed in the measurement by that time; an op that
// a step sends after another's answer (sentAfterKey) is measured from when
// it was sent, its wait for the first one belonging to that one.
func newSender(x executor, rec *recorder, b *book) sender {
	return func(ctx context.Context, o op) outcome {
		sent := time.Now()
		due, open := ctx.Value(intendedKey{}).(time.Time)
		start := sent
		if open && ctx.Value(sentAfterKey{}) == nil {
			start = due
		}
		b.sending(o)
		out := x.do(ctx, o)
		now := time.Now()
		at := now
		if open {
			at = due
		}
		rec.record(o.kind, out, now.Sub(start), at)
		b.answered(o, out)
		return out
	}
}

// sentAfterKey marks the ops a step sends once an earlier op of it was
// answered (double-spend's purchases, after their grant; a checkout's
// capture or void, after its authorization).
type sentAfterKey struct{}
