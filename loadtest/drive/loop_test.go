package drive

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

	"github.com/pointledger/pointledger/loadtest/report"
)

func TestUnsteady(t *testing.T) {
	timeline := func(oks ...int64) []report.Second {
		var tl []report.Second
		for i, ok := range oks {
			tl = append(tl, report.Second{T: float64(i), OK: ok})
		}
		return tl
	}
	for _, c := range []struct {
		name string
		tl   []report.Second
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
	delay func(o Op) time.Duration
	mu    sync.Mutex
	seen  map[string]bool
}

func (f *fakeExec) Do(ctx context.Context, o Op) Outcome {
	select {
	case <-time.After(f.delay(o)):
	case <-ctx.Done():
		return Outcome{Code: CodeOf(ctx.Err())}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen == nil {
		f.seen = map[string]bool{}
	}
	replayed := f.seen[o.RequestID]
	f.seen[o.RequestID] = true
	return Outcome{Code: "ok", EntryID: "e-" + o.RequestID, Replayed: replayed}
}

func testParams() *Params {
	return &Params{IDs: new(atomic.Int64), Users: 10, Spends: 4, Covers: 2, RunID: "t",
		Amount: decimal.NewFromInt(1), Grant: decimal.NewFromInt(100)}
}

// Open loop at 100 steps/s for 4 s: the system answers at once for a second,
// then stalls until 6 s. The 300 steps it kept waiting are measured, late as
// they are answered, with the latency they had.
func TestAnOpenLoopMeasuresTheStepsAStallKeptWaiting(t *testing.T) {
	start := time.Now()
	x := &fakeExec{delay: func(Op) time.Duration {
		if time.Since(start) < time.Second {
			return 0
		}
		return time.Until(start.Add(6 * time.Second))
	}}
	rec := NewRecorder()
	OpenLoop(context.Background(), NewScenario("uniform", testParams(), false), NewSender(x, rec, nil), 100, 4096, 1, 0, 4*time.Second, rec, io.Discard)
	run := rec.Run()
	if run.Requests < 350 || run.Latency.P99 < 1000 || len(run.Timeline) != 4 {
		t.Errorf("400 steps due, 300 of them stalled for seconds: %d requests, p99 %.1f ms, %d seconds of timeline", run.Requests, run.Latency.P99, len(run.Timeline))
	}
}

// Double-spend's purchases go out once their grant is answered: their
// latency is their own, not the grant's too. (Answered at once, a purchase
// still waits for the CPU: on a busy machine, tens of milliseconds. The
// grant's second keeps that apart from the grant's time.)
func TestDoubleSpendPurchasesAreTimedFromTheirSending(t *testing.T) {
	x := &fakeExec{delay: func(o Op) time.Duration {
		if o.Kind == "grant" {
			return time.Second
		}
		return 0
	}}
	rec := NewRecorder()
	OpenLoop(context.Background(), NewScenario("double-spend", testParams(), false), NewSender(x, rec, nil), 5, 4096, 1, 0, 2*time.Second, rec, io.Discard)
	run := rec.Run()
	if p, g := run.ByOp["purchase"], run.ByOp["grant"]; p.Count == 0 || p.P50 > 500 || g.P50 < 990 {
		t.Errorf("grants of 1 s, purchases answered at once: purchase p50 %.1f ms (%d), grant p50 %.1f ms", p.P50, p.Count, g.P50)
	}
}

// Seconds at the end in which nothing was answered are in the timeline, and
// make the run unsteady.
func TestAStallAtTheEndShows(t *testing.T) {
	rec := NewRecorder()
	rec.Measure(12 * time.Second)
	for sec := range 8 {
		for range 100 {
			rec.record("purchase", Outcome{Code: "ok"}, time.Millisecond, rec.begin.Add(time.Duration(sec)*time.Second+time.Millisecond))
		}
	}
	run := rec.Run()
	if len(run.Timeline) != 12 || len(run.Notes) == 0 {
		t.Errorf("12 s measured, nothing answered in the last 4: %d seconds of timeline, notes %v", len(run.Timeline), run.Notes)
	}
}

// retry-storm re-sends request ids: purchases/s counts each purchase once,
// not its replays.
func TestReplaysAreNotCountedAsPurchases(t *testing.T) {
	x := &fakeExec{delay: func(Op) time.Duration { return 0 }}
	rec := NewRecorder()
	rec.Measure(time.Minute)
	p := testParams()
	s := NewScenario("retry-storm", p, false)
	send := NewSender(x, rec, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		s.Step(context.Background(), rng, send)
	}
	run := rec.Run()
	if counted, made := int64(math.Round(run.Purchases*run.DurationS)), int64(len(x.seen)); counted != made || run.OK <= made {
		t.Errorf("%d acknowledged requests for %d purchases made: %d counted as purchases", run.OK, made, counted)
	}
}

func TestRecorderMeasuresOnlyTheWindow(t *testing.T) {
	rec := NewRecorder()
	before := time.Now()
	rec.record("purchase", Outcome{Code: "ok"}, time.Millisecond, before) // warm-up: not measured
	rec.Measure(3 * time.Second)
	now := time.Now()
	rec.record("purchase", Outcome{Code: "ok"}, 2*time.Millisecond, now)
	rec.record("purchase", Outcome{Code: "failed_precondition"}, 40*time.Millisecond, now)
	rec.record("balance", Outcome{Code: "ok"}, 3*time.Millisecond, now.Add(2*time.Second))
	rec.record("purchase", Outcome{Code: "ok"}, time.Millisecond, now.Add(2*time.Hour)) // after the end
	run := rec.Run()
	if run.Requests != 3 || run.OK != 2 || run.Codes["failed_precondition"] != 1 {
		t.Errorf("requests %d ok %d codes %v, want 3, 2 and one failed_precondition", run.Requests, run.OK, run.Codes)
	}
	if run.PurchaseCount != 1 || run.GrantCount != 0 || run.Mutations != 1 {
		t.Errorf("purchases %d, grants %d, mutations %d acknowledged, want 1, 0 and 1", run.PurchaseCount, run.GrantCount, run.Mutations)
	}
	if run.Latency.Max < 39.9 || run.Latency.Max > 40.1 || run.ByOp["purchase"].Count != 2 || run.ByOp["balance"].Count != 1 {
		t.Errorf("latency %+v by op %+v", run.Latency, run.ByOp)
	}
	if c := run.CodesByOp["purchase"]; c["ok"] != 1 || c["failed_precondition"] != 1 || run.CodesByOp["balance"]["ok"] != 1 {
		t.Errorf("outcomes by op %v, want purchase ok=1 failed_precondition=1, balance ok=1", run.CodesByOp)
	}
	if len(run.Timeline) != 3 || run.Timeline[0].OK != 1 || run.Timeline[0].Errors != 1 || run.Timeline[2].OK != 1 {
		t.Errorf("timeline %+v", run.Timeline)
	}
	var n int64
	for _, b := range run.Histogram {
		n += b.Count
	}
	if n != 3 {
		t.Errorf("histogram holds %d requests, want 3: %+v", n, run.Histogram)
	}
}

// A scenario that has done what it measures ends the measurement: a closed
// loop asked for an hour returns once EndNow is called, and what is
// answered after it is not measured.
func TestEndNowEndsTheMeasurement(t *testing.T) {
	x := &fakeExec{delay: func(Op) time.Duration { return time.Millisecond }}
	rec := NewRecorder()
	rec.EndNow() // before the measurement: nothing to end
	rec.OnMeasure(func() { go func() { time.Sleep(500 * time.Millisecond); rec.EndNow() }() }, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ClosedLoop(context.Background(), NewScenario("uniform", testParams(), false), NewSender(x, rec, nil), 2, 0, time.Hour, rec, io.Discard)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		t.Fatal("the closed loop went on after EndNow")
	}
	run := rec.Run()
	if run.DurationS >= 3600 || run.OK == 0 {
		t.Errorf("measured %.1f s, %d ok: want the measurement ended by EndNow, with requests in it", run.DurationS, run.OK)
	}
	late := rec.end.Add(time.Millisecond)
	rec.record("purchase", Outcome{Code: "ok"}, time.Millisecond, late)
	if after := rec.Run(); after.OK != run.OK {
		t.Errorf("an answer after the end was measured: %d ok, was %d", after.OK, run.OK)
	}
}

// TestRecorderCountsPurchasesAndGrants: acknowledged purchases and grants,
// replays and refusals left out, for what ledgerd's CPU is divided by.
func TestRecorderCountsPurchasesAndGrants(t *testing.T) {
	rec := NewRecorder()
	rec.Measure(time.Minute)
	now := time.Now()
	rec.record("grant", Outcome{Code: "ok"}, time.Millisecond, now)
	rec.record("grant", Outcome{Code: "ok", Replayed: true}, time.Millisecond, now)
	rec.record("grant", Outcome{Code: "resource_exhausted"}, time.Millisecond, now)
	rec.record("purchase", Outcome{Code: "ok"}, time.Millisecond, now)
	rec.record("purchase", Outcome{Code: "ok"}, time.Millisecond, now)
	rec.record("refund", Outcome{Code: "ok"}, time.Millisecond, now)
	run := rec.Run()
	if run.GrantCount != 1 || run.PurchaseCount != 2 || run.Mutations != 4 {
		t.Errorf("grants %d, purchases %d, mutations %d acknowledged, want 1, 2 and 4", run.GrantCount, run.PurchaseCount, run.Mutations)
	}
}
