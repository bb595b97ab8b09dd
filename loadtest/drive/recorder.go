package drive

import (
	"fmt"
	"maps"
	"math"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/pointledger/pointledger/loadtest/report"
)

// Recorder collects the outcomes of one run. Requests that complete before
// begin (the warm-up) or after end are not measured.
type Recorder struct {
	mu         sync.Mutex
	begin, end time.Time
	onBegin    []func() // called when measuring begins, and ends (OnMeasure)
	onEnd      []func()
	ended      chan struct{} // closed by EndNow
	endOnce    sync.Once
	all        *hdrhistogram.Histogram
	byOp       map[string]*hdrhistogram.Histogram
	seconds    []*second
	codes      map[string]int64
	codesByOp  map[string]map[string]int64
	purchases  int64 // acknowledged, replays left out
	grants     int64 // the same
	mutations  int64 // acknowledged requests that write (op.mutates), replays left out
	steps      int64 // scenario steps completed
}

type second struct {
	ok, errors int64
	hist       *hdrhistogram.Histogram
}

// NewRecorder is a recorder that has not begun measuring.
func NewRecorder() *Recorder {
	return &Recorder{ended: make(chan struct{}), all: report.NewLatencyHistogram(), byOp: map[string]*hdrhistogram.Histogram{}, codes: map[string]int64{}, codesByOp: map[string]map[string]int64{}}
}

// OnMeasure has begin called when the measurement begins, and end when it
// ends (either may be nil): what else a run reads then (the proxy's
// counts, the instances' metrics, the CPU used) spans the same time. Call
// it before the run starts.
func (r *Recorder) OnMeasure(begin, end func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if begin != nil {
		r.onBegin = append(r.onBegin, begin)
	}
	if end != nil {
		r.onEnd = append(r.onEnd, end)
	}
}

// Measure starts measuring now, for d.
func (r *Recorder) Measure(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.begin = time.Now()
	r.end = r.begin.Add(d)
}

// EndNow ends the measurement now, if it has begun: a scenario that has
// done what it measures (the campaign, once its budget is exhausted) need
// not wait out the rest of -duration, and what comes after is not
// measured.
func (r *Recorder) EndNow() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.begin.IsZero() {
		return
	}
	if now := time.Now(); now.Before(r.end) {
		r.end = now
	}
	r.endOnce.Do(func() { close(r.ended) })
}

// record counts one request. at places it in the measurement: when it was
// answered (closed loop) or when it was due (open loop).
func (r *Recorder) record(kind string, out Outcome, latency time.Duration, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.begin.IsZero() || at.Before(r.begin) || !at.Before(r.end) {
		return
	}
	report.RecordLatency(r.all, latency)
	h, ok := r.byOp[kind]
	if !ok {
		h = report.NewLatencyHistogram()
		r.byOp[kind] = h
	}
	report.RecordLatency(h, latency)
	r.codes[out.Code]++
	if r.codesByOp[kind] == nil {
		r.codesByOp[kind] = map[string]int64{}
	}
	r.codesByOp[kind][out.Code]++
	i := int(at.Sub(r.begin) / time.Second)
	for len(r.seconds) <= i {
		r.seconds = append(r.seconds, &second{hist: report.NewLatencyHistogram()})
	}
	s := r.seconds[i]
	report.RecordLatency(s.hist, latency)
	if out.Code != "ok" {
		s.errors++
		return
	}
	s.ok++
	if out.Replayed {
		return // a retry's answer: the purchase was counted when it was made
	}
	switch kind {
	case "purchase":
		r.purchases++
	case "grant":
		r.grants++
	}
	if (Op{Kind: kind}).Mutates() {
		r.mutations++
	}
}

// endsAt is when the measurement ends (zero before it begins).
func (r *Recorder) endsAt() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.end
}

// stepDone counts a step of the scenario completed at at.
func (r *Recorder) stepDone(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.begin.IsZero() && !at.Before(r.begin) && at.Before(r.end) {
		r.steps++
	}
}

// snapshot is for the progress line: requests, errors and the p99 so far.
func (r *Recorder) snapshot() (ok, errs int64, p99 float64) {
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

// Run summarises the recorder as a Run.
func (r *Recorder) Run() report.Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.end.Sub(r.begin).Seconds()
	run := report.Run{DurationS: d, Codes: map[string]int64{}, ByOp: map[string]report.Percentiles{},
		Latency: report.LatencyPercentiles(r.all)}
	for c, n := range r.codes {
		run.Codes[c] = n
		run.Requests += n
	}
	run.OK = r.codes["ok"]
	run.Mutations, run.PurchaseCount, run.GrantCount = r.mutations, r.purchases, r.grants
	if d > 0 {
		run.Throughput = float64(run.OK) / d
		run.Purchases = float64(r.purchases) / d
		run.Steps = float64(r.steps) / d
	}
	for k, h := range r.byOp {
		run.ByOp[k] = report.LatencyPercentiles(h)
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
		r.seconds = append(r.seconds, &second{hist: report.NewLatencyHistogram()})
	}
	for i, s := range r.seconds {
		run.Timeline = append(run.Timeline, report.Second{T: float64(i), OK: s.ok, Errors: s.errors,
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
func unsteady(tl []report.Second) string {
	q := len(tl) / 4
	if q < 2 {
		return ""
	}
	mean := func(ss []report.Second) float64 {
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

// buckets: four a doubling (2^(1/4) apart), from the smallest latency to the
// largest.
func buckets(h *hdrhistogram.Histogram) []report.Bucket {
	if h.TotalCount() == 0 {
		return nil
	}
	step := math.Pow(2, 0.25)
	var out []report.Bucket
	for upper := float64(h.Min()) * step; ; upper *= step {
		out = append(out, report.Bucket{UpperMS: upper / 1000})
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
