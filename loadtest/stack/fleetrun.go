package stack

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/pointledger/pointledger/client"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/loadtest/drive"
	"github.com/pointledger/pointledger/loadtest/report"
)

// FleetRun watches a run's instances for the report: each one's write path
// (its /metrics) and what the balancer sent it, when the measurement begins
// and ends, and with -kill-one the kill and what followed.
type FleetRun struct {
	Balancer  *Balancer
	http      *http.Client
	killAfter time.Duration // 0: no kill
	window    time.Duration // after a kill, when every user must be served

	mu            sync.Mutex
	begin         time.Time
	before, after []report.WritePath
	scraped       []error // the last scrape's, by instance
	countsBefore  []report.CallCounts
	countsAfter   []report.CallCounts
	victim        int   // the killed instance; -1: none
	atKill        int64 // the victim's unreachable calls when it was killed
	killErr       error
	killDone      chan struct{}
	stopKill      chan struct{}
}

// NewFleetRun puts a balancer in front of instances, each reached through
// c with token, and hooks the watch into rec's measurement.
func NewFleetRun(instances []*Instance, c *http.Client, token string, health, killAfter, window time.Duration, rec *drive.Recorder) *FleetRun {
	var opts []connect.ClientOption
	if token != "" {
		opts = append(opts, connect.WithInterceptors(client.Bearer(token)))
	}
	targets := make([]*target, len(instances))
	for i, in := range instances {
		x := drive.NewConnectExec(pointledgerv1connect.NewLedgerServiceClient(c, in.URL, opts...))
		targets[i] = &target{inst: in, x: x, conn: x}
	}
	n := len(instances)
	fr := &FleetRun{Balancer: newBalancer(targets, health), http: c, killAfter: killAfter, window: window, victim: -1,
		before: make([]report.WritePath, n), after: make([]report.WritePath, n), scraped: make([]error, n),
		killDone: make(chan struct{}), stopKill: make(chan struct{})}
	rec.OnMeasure(fr.measureBegins, fr.measureEnds)
	return fr
}

// scrapeAll reads every live instance's write path into into, at once.
func (fr *FleetRun) scrapeAll(into []report.WritePath) {
	var wg sync.WaitGroup
	for i, t := range fr.Balancer.targets {
		if t.inst.cmd != nil && !t.inst.alive() {
			continue // killed: its figures end at its last scrape
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			w, err := report.Scrape(ctx, fr.http, t.inst.OpsURL)
			fr.mu.Lock()
			defer fr.mu.Unlock()
			if fr.scraped[i] = err; err == nil {
				into[i] = w
			}
		})
	}
	wg.Wait()
}

func (fr *FleetRun) measureBegins() {
	fr.scrapeAll(fr.before)
	fr.mu.Lock()
	fr.begin = time.Now()
	fr.countsBefore = fr.Balancer.counts()
	fr.mu.Unlock()
	if fr.killAfter <= 0 {
		close(fr.killDone)
		return
	}
	go func() {
		defer close(fr.killDone)
		select {
		case <-time.After(fr.killAfter):
			fr.killOne()
		case <-fr.stopKill:
		}
	}()
}

func (fr *FleetRun) measureEnds() {
	close(fr.stopKill)
	<-fr.killDone
	fr.scrapeAll(fr.after)
	fr.mu.Lock()
	fr.countsAfter = fr.Balancer.counts()
	fr.mu.Unlock()
}

// killOne SIGKILLs the instance that committed the most since the
// measurement began (under affinity, the owner of the hot user), after
// reading its metrics a last time, and tells the balancer, which goes on
// sending it calls until its health checks take it out.
func (fr *FleetRun) killOne() {
	now := make([]report.WritePath, len(fr.Balancer.targets))
	fr.scrapeAll(now)
	fr.mu.Lock()
	victim := 0
	for i := range now {
		if now[i].Minus(fr.before[i]).Committed() > now[victim].Minus(fr.before[victim]).Committed() {
			victim = i
		}
	}
	fr.after[victim] = now[victim]
	fr.mu.Unlock()
	t := fr.Balancer.targets[victim]
	t.mu.Lock()
	atKill := t.n.Unreachable
	t.mu.Unlock()
	at := time.Now()
	fmt.Fprintf(os.Stderr, "\n  SIGKILL %s (%s), %s into the measurement\n", t.inst.Name, t.inst.URL, at.Sub(fr.begin).Round(time.Millisecond))
	err := t.inst.kill()
	fr.Balancer.killed(at, fr.window)
	fr.mu.Lock()
	fr.victim, fr.atKill, fr.killErr = victim, atKill, err
	fr.mu.Unlock()
}

// Figures are the fleet's part of the run: per instance and in total, and
// the kill. affinity says whether the instances knew their peers;
// durationS is the measurement's length.
func (fr *FleetRun) Figures(affinity bool, durationS float64) (*report.Fleet, error) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if fr.killErr != nil {
		return nil, fr.killErr
	}
	if fr.countsBefore == nil || fr.countsAfter == nil {
		return nil, nil // the measurement did not run to its end
	}
	f := &report.Fleet{Instances: len(fr.Balancer.targets), Affinity: affinity,
		Balancer: fmt.Sprintf("the load tool, round robin per call over the instances in service (health checked every %s, each check given %s: out after %d failed checks or %d calls in a row that could not reach it, back after %d passed checks; no retries)",
			fr.Balancer.interval, healthTimeout, healthFails, passiveFails, healthPasses)}
	if fr.victim >= 0 {
		k := fr.Balancer.failover(fr.Balancer.targets[fr.victim], fr.atKill, fr.begin)
		f.Kill = &k
	}
	var total report.WritePath
	var totalCounts report.CallCounts
	notes := []string{}
	for i, t := range fr.Balancer.targets {
		counts := fr.countsAfter[i].Minus(fr.countsBefore[i])
		wp := fr.after[i].Minus(fr.before[i])
		fig := report.NewInstanceFigures(t.inst.Name, counts, wp, durationS)
		switch {
		case i == fr.victim:
			fig.Note = fmt.Sprintf("SIGKILLed %.1f s into the measurement: its write path counted until then", f.Kill.AtS)
		case fr.scraped[i] != nil:
			fig.Note = "no write-path figures: " + fr.scraped[i].Error()
			notes = append(notes, t.inst.Name)
		}
		t.mu.Lock()
		if outs := t.outs; outs > 0 && i != fr.victim {
			fig.Note = strings.TrimPrefix(fig.Note+fmt.Sprintf("; taken out of service %d times, the last by %s", outs, t.outBy), "; ")
		}
		t.mu.Unlock()
		f.PerInstance = append(f.PerInstance, fig)
		total = total.Plus(wp)
		totalCounts = totalCounts.Plus(counts)
	}
	f.Total = report.NewInstanceFigures("total", totalCounts, total, durationS)
	if len(notes) > 0 {
		f.Total.Note = "without the write path of " + strings.Join(notes, ", ")
	}
	return f, nil
}
