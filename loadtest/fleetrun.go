package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/auth"
)

// fleetConfig is the shape of one ledgerd run: how many instances, and
// whether they know their peers.
type fleetConfig struct {
	instances int
	affinity  bool
}

// runName names a run of c: "ledgerd" for one instance, "ledgerd-x3" for
// three round robin, "ledgerd-x3-affinity" with affinity.
func (c fleetConfig) runName() string {
	name := "ledgerd"
	if c.instances > 1 || c.affinity {
		name += fmt.Sprintf("-x%d", c.instances)
	}
	if c.affinity {
		name += "-affinity"
	}
	return name
}

// fleetConfigs are the configurations the invocation measures, in order:
// with -compare one instance, then -instances round robin, then the same
// with affinity; else the one the flags ask for.
func (f flags) fleetConfigs() []fleetConfig {
	if f.compare {
		return []fleetConfig{{instances: 1}, {instances: f.instances}, {instances: f.instances, affinity: true}}
	}
	return []fleetConfig{{instances: f.instances, affinity: f.affinity}}
}

// fleetRun watches a run's instances for the report: each one's write path
// (its /metrics) and what the balancer sent it, when the measurement begins
// and ends, and with -kill-one the kill and what followed.
type fleetRun struct {
	b         *balancer
	http      *http.Client
	killAfter time.Duration // 0: no kill
	window    time.Duration // after a kill, when every user must be served

	mu            sync.Mutex
	begin         time.Time
	before, after []writePath
	scraped       []error // the last scrape's, by instance
	countsBefore  []targetCounts
	countsAfter   []targetCounts
	victim        int // the killed instance; -1: none
	killAt        time.Time
	atKill        int64 // the victim's unreachable calls when it was killed
	killErr       error
	killDone      chan struct{}
	stopKill      chan struct{}
}

// newFleetRun puts a balancer in front of instances, each reached through
// c with token, and hooks the watch into rec's measurement.
func newFleetRun(instances []*instance, c *http.Client, token string, health, killAfter, window time.Duration, rec *recorder) *fleetRun {
	var opts []connect.ClientOption
	if token != "" {
		opts = append(opts, connect.WithInterceptors(auth.Bearer(token)))
	}
	targets := make([]*target, len(instances))
	for i, in := range instances {
		x := &connectExec{c: pointledgerv1connect.NewLedgerServiceClient(c, in.url, opts...)}
		targets[i] = &target{inst: in, x: x, conn: x}
	}
	n := len(instances)
	fr := &fleetRun{b: newBalancer(targets, health), http: c, killAfter: killAfter, window: window, victim: -1,
		before: make([]writePath, n), after: make([]writePath, n), scraped: make([]error, n),
		killDone: make(chan struct{}), stopKill: make(chan struct{})}
	rec.onBegin = append(rec.onBegin, fr.measureBegins)
	rec.onEnd = append(rec.onEnd, fr.measureEnds)
	return fr
}

// scrapeAll reads every live instance's write path into into, at once.
func (fr *fleetRun) scrapeAll(into []writePath) {
	var wg sync.WaitGroup
	for i, t := range fr.b.targets {
		if t.inst.cmd != nil && !t.inst.alive() {
			continue // killed: its figures end at its last scrape
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			w, err := scrape(ctx, fr.http, t.inst.opsURL)
			fr.mu.Lock()
			defer fr.mu.Unlock()
			if fr.scraped[i] = err; err == nil {
				into[i] = w
			}
		})
	}
	wg.Wait()
}

func (fr *fleetRun) measureBegins() {
	fr.scrapeAll(fr.before)
	fr.mu.Lock()
	fr.begin = time.Now()
	fr.countsBefore = fr.b.counts()
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

func (fr *fleetRun) measureEnds() {
	close(fr.stopKill)
	<-fr.killDone
	fr.scrapeAll(fr.after)
	fr.mu.Lock()
	fr.countsAfter = fr.b.counts()
	fr.mu.Unlock()
}

// killOne SIGKILLs the instance that committed the most since the
// measurement began (under affinity, the owner of the hot user), after
// reading its metrics a last time, and tells the balancer, which goes on
// sending it calls until its health checks take it out.
func (fr *fleetRun) killOne() {
	now := make([]writePath, len(fr.b.targets))
	fr.scrapeAll(now)
	fr.mu.Lock()
	victim := 0
	for i := range now {
		if now[i].committed-fr.before[i].committed > now[victim].committed-fr.before[victim].committed {
			victim = i
		}
	}
	fr.after[victim] = now[victim]
	fr.mu.Unlock()
	t := fr.b.targets[victim]
	t.mu.Lock()
	atKill := t.n.unreachable
	t.mu.Unlock()
	at := time.Now()
	fmt.Fprintf(os.Stderr, "\n  SIGKILL %s (%s), %s into the measurement\n", t.inst.name, t.inst.url, at.Sub(fr.begin).Round(time.Millisecond))
	err := t.inst.kill()
	fr.b.killed(at, fr.window)
	fr.mu.Lock()
	fr.victim, fr.killAt, fr.atKill, fr.killErr = victim, at, atKill, err
	fr.mu.Unlock()
}

// figures are the fleet's part of run: per instance and in total, and the
// kill. durationS is the measurement's length.
func (fr *fleetRun) figures(c fleetConfig, durationS float64) (*Fleet, error) {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if fr.killErr != nil {
		return nil, fr.killErr
	}
	if fr.countsBefore == nil || fr.countsAfter == nil {
		return nil, nil // the measurement did not run to its end
	}
	f := &Fleet{Instances: len(fr.b.targets), Affinity: c.affinity,
		Balancer: fmt.Sprintf("the load tool, round robin per call over the instances in service (health checked every %s, each check given %s: out after %d failed checks or %d calls in a row that could not reach it, back after %d passed checks; no retries)",
			fr.b.interval, healthTimeout, healthFails, passiveFails, healthPasses)}
	var total writePath
	var totalCounts targetCounts
	notes := []string{}
	for i, t := range fr.b.targets {
		counts := fr.countsAfter[i].minus(fr.countsBefore[i])
		wp := fr.after[i].minus(fr.before[i])
		fig := instanceFigures(t.inst.name, counts, wp, durationS)
		switch {
		case i == fr.victim:
			fig.Note = fmt.Sprintf("SIGKILLed %.1f s into the measurement: its write path counted until then", fr.killAt.Sub(fr.begin).Seconds())
		case fr.scraped[i] != nil:
			fig.Note = "no write-path figures: " + fr.scraped[i].Error()
			notes = append(notes, t.inst.name)
		}
		t.mu.Lock()
		if outs := t.outs; outs > 0 && i != fr.victim {
			fig.Note = strings.TrimPrefix(fig.Note+fmt.Sprintf("; taken out of service %d times, the last by %s", outs, t.outBy), "; ")
		}
		t.mu.Unlock()
		f.PerInstance = append(f.PerInstance, fig)
		total = total.plus(wp)
		totalCounts = totalCounts.plus(counts)
	}
	f.Total = instanceFigures("total", totalCounts, total, durationS)
	if len(notes) > 0 {
		f.Total.Note = "without the write path of " + strings.Join(notes, ", ")
	}
	if fr.victim >= 0 {
		k := fr.b.failover(fr.b.targets[fr.victim], fr.atKill)
		k.AtS = fr.killAt.Sub(fr.begin).Seconds()
		f.Kill = &k
	}
	return f, nil
}

func instanceFigures(name string, n targetCounts, w writePath, durationS float64) InstanceFigures {
	fig := InstanceFigures{Name: name, Calls: n.calls, OK: n.ok, Codes: n.codes,
		Committed: int64(w.committed), Groups: int64(w.groups), GroupSizes: w.groupSizes(), Conflicts: int64(w.conflicts),
		Retries: map[string]int64{}}
	if durationS > 0 {
		fig.Purchases = float64(n.purchases) / durationS
		fig.CPU = w.cpu / durationS
	}
	if w.groups > 0 {
		fig.MeanGroup = w.committed / w.groups
	}
	for reason, k := range w.retries {
		fig.Retries[reason] = int64(k)
	}
	fig.Forwarded, fig.FellBack = int64(w.forwarded), int64(w.fellBack)
	if len(w.forwardFailed) > 0 {
		fig.ForwardFailures = map[string]int64{}
		for reason, k := range w.forwardFailed {
			fig.ForwardFailures[reason] = int64(k)
		}
	}
	return fig
}

// plus adds two instances' counts up.
func (c targetCounts) plus(o targetCounts) targetCounts {
	s := targetCounts{calls: c.calls + o.calls, ok: c.ok + o.ok, purchases: c.purchases + o.purchases,
		unreachable: c.unreachable + o.unreachable, codes: map[string]int64{}}
	for _, x := range []targetCounts{c, o} {
		for code, n := range x.codes {
			s.codes[code] += n
		}
	}
	return s
}

// client is a client of an instance in service, for the checks and notes
// that ask ledgerd after the run.
func (b *balancer) client() pointledgerv1connect.LedgerServiceClient {
	if t := b.pick(); t != nil {
		return t.conn.c
	}
	return b.targets[0].conn.c
}

// lastSpent is the last acknowledged purchase or capture, whichever
// instance answered it.
func (b *balancer) lastSpent() *pb.Entry {
	var last *pb.Entry
	for _, t := range b.targets {
		t.conn.mu.Lock()
		if e := t.conn.last; e != nil && (last == nil || e.CreateTime.AsTime().After(last.CreateTime.AsTime())) {
			last = e
		}
		t.conn.mu.Unlock()
	}
	return last
}

// opsURL is the operations listener of an instance in service, for the
// projection's status.
func (b *balancer) opsURL() string {
	if t := b.pick(); t != nil {
		return t.inst.opsURL
	}
	return ""
}
