package main

import (
	"context"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

func TestUnsteady(t *testing.T) {
	timeline := func(oks ...int64) []Second {
		var tl []Second
		for i, ok := range oks {
			tl = append(tl, Second{T: float64(i), OK: ok})
		}
		return tl
	}
	for _, c := range []struct {
		name string
		tl   []Second
		want string // "" for steady, else a part of the note
	}{
		{"flat", timeline(500, 510, 490, 505, 495, 500, 502, 498), ""},
		{"within 15%", timeline(500, 500, 520, 540, 550, 560, 570, 570), ""},
		{"rising", timeline(250, 300, 400, 500, 600, 650, 700, 700), "275/s in the first quarter of the measurement, 700/s in the last"},
		{"falling", timeline(800, 800, 700, 600, 500, 400, 300, 300), "800/s in the first quarter of the measurement, 300/s in the last"},
		{"too short to say", timeline(100, 900, 100, 900, 100, 900, 100), ""},
		{"nothing in the first quarter", timeline(0, 0, 0, 10, 20, 30, 40, 50), "0/s in the first quarter of the measurement, 45/s in the last"},
		{"nothing at all", timeline(0, 0, 0, 0, 0, 0, 0, 0), ""},
	} {
		got := unsteady(c.tl)
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: unsteady = %q, want %q", c.name, got, c.want)
		}
	}
}

// fakeExec stands in for ledgerd where the test needs an answer at a chosen
// time: it answers after delay(op), and a request id it has seen again as a
// replay.
type fakeExec struct {
	delay func(o op) time.Duration
	mu    sync.Mutex
	seen  map[string]bool
}

func (f *fakeExec) do(ctx context.Context, o op) outcome {
	select {
	case <-time.After(f.delay(o)):
	case <-ctx.Done():
		return outcome{code: codeOf(ctx.Err())}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen == nil {
		f.seen = map[string]bool{}
	}
	replayed := f.seen[o.requestID]
	f.seen[o.requestID] = true
	return outcome{code: "ok", entryID: "e-" + o.requestID, replayed: replayed}
}

func testParams() *params {
	return &params{ids: new(atomic.Int64), users: 10, spends: 4, covers: 2, runID: "t",
		amount: decimal.NewFromInt(1), grant: decimal.NewFromInt(100)}
}

// Open loop at 100 steps/s for 4 s: the system answers at once for a second,
// then stalls until 6 s. The 300 steps it kept waiting are measured, late as
// they are answered, with the latency they had.
func TestAnOpenLoopMeasuresTheStepsAStallKeptWaiting(t *testing.T) {
	start := time.Now()
	x := &fakeExec{delay: func(op) time.Duration {
		if time.Since(start) < time.Second {
			return 0
		}
		return time.Until(start.Add(6 * time.Second))
	}}
	rec := newRecorder()
	openLoop(context.Background(), newScenario("uniform", testParams(), false), newSender(x, rec, nil), 100, 4096, 1, 0, 4*time.Second, rec, io.Discard)
	run := rec.run()
	if run.Requests < 350 || run.Latency.P99 < 1000 || len(run.Timeline) != 4 {
		t.Errorf("400 steps due, 300 of them stalled for seconds: %d requests, p99 %.1f ms, %d seconds of timeline", run.Requests, run.Latency.P99, len(run.Timeline))
	}
}

// Double-spend's purchases go out once their grant is answered: their
// latency is their own, not the grant's too. (Answered at once, a purchase
// still waits for the CPU: on a busy machine, tens of milliseconds. The
// grant's second keeps that apart from the grant's time.)
func TestDoubleSpendPurchasesAreTimedFromTheirSending(t *testing.T) {
	x := &fakeExec{delay: func(o op) time.Duration {
		if o.kind == "grant" {
			return time.Second
		}
		return 0
	}}
	rec := newRecorder()
	openLoop(context.Background(), newScenario("double-spend", testParams(), false), newSender(x, rec, nil), 5, 4096, 1, 0, 2*time.Second, rec, io.Discard)
	run := rec.run()
	if p, g := run.ByOp["purchase"], run.ByOp["grant"]; p.Count == 0 || p.P50 > 500 || g.P50 < 990 {
		t.Errorf("grants of 1 s, purchases answered at once: purchase p50 %.1f ms (%d), grant p50 %.1f ms", p.P50, p.Count, g.P50)
	}
}

// Seconds at the end in which nothing was answered are in the timeline, and
// make the run unsteady.
func TestAStallAtTheEndShows(t *testing.T) {
	rec := newRecorder()
	rec.measure(12 * time.Second)
	for sec := range 8 {
		for range 100 {
			rec.record("purchase", outcome{code: "ok"}, time.Millisecond, rec.begin.Add(time.Duration(sec)*time.Second+time.Millisecond))
		}
	}
	run := rec.run()
	if len(run.Timeline) != 12 || len(run.Notes) == 0 {
		t.Errorf("12 s measured, nothing answered in the last 4: %d seconds of timeline, notes %v", len(run.Timeline), run.Notes)
	}
}

// retry-storm re-sends request ids: purchases/s counts each purchase once,
// not its replays.
func TestReplaysAreNotCountedAsPurchases(t *testing.T) {
	x := &fakeExec{delay: func(op) time.Duration { return 0 }}
	rec := newRecorder()
	rec.measure(time.Minute)
	p := testParams()
	s := newScenario("retry-storm", p, false)
	send := newSender(x, rec, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		s.step(context.Background(), rng, send)
	}
	run := rec.run()
	if counted, made := int64(math.Round(run.Purchases*run.DurationS)), int64(len(x.seen)); counted != made || run.OK <= made {
		t.Errorf("%d acknowledged requests for %d purchases made: %d counted as purchases", run.OK, made, counted)
	}
}

// The exit status needs every run of ledgerd to have written: a closed loop
// that wrote does not cover an open loop that did not, and reads are no
// writes.
func TestEveryRunOfLedgerdMustWrite(t *testing.T) {
	for _, c := range []struct {
		runs []Run
		want bool
	}{
		{[]Run{{Name: "ledgerd", Mutations: 5}, {Name: "ledgerd-open", Mutations: 3}, {Name: "baseline-direct"}}, true},
		{[]Run{{Name: "ledgerd", Mutations: 5}, {Name: "ledgerd-open", OK: 40}}, false},
		{[]Run{{Name: "ledgerd", OK: 9}}, false},
		{[]Run{{Name: "baseline-direct", Mutations: 9}}, false},
	} {
		if got := everyRunWrote(c.runs); got != c.want {
			t.Errorf("everyRunWrote(%+v) = %v, want %v", c.runs, got, c.want)
		}
	}
}
