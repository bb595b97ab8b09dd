package stack

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/loadtest/drive"
	"github.com/pointledger/pointledger/loadtest/report"
)

// A Balancer is the load balancer in front of a fleet, played by the load
// tool as production's plays it: each call goes to the next instance in
// service, in turn (round robin, per call). It never retries a call: a call
// that fails is the client's failure, counted as such.
//
// An instance is taken out of service as a load balancer's health checks
// would: after healthFails failed health checks in a row (GET /healthz
// every interval, each given healthTimeout: the active check of an AWS
// load balancer, whose unhealthy threshold is 2 and timeout 2 s at the
// least), or after passiveFails calls in a row that could not reach it (a
// refused or broken connection: the passive check, as Envoy's outlier
// detection counts consecutive gateway failures, 5 by default). It is put
// back after healthPasses checks in a row pass.
type Balancer struct {
	targets  []*target
	next     atomic.Uint64
	interval time.Duration // between health checks

	afterKill atomic.Bool // an instance was killed: calls are followed (lets do skip mu before)

	mu     sync.Mutex
	killAt time.Time             // when an instance was killed; zero: none was
	window time.Duration         // after the kill, when every mutation must be served
	users  map[string]*recovered // mutations sent after the kill, by user
}

const (
	healthFails   = 2
	healthPasses  = 2
	passiveFails  = 5
	healthTimeout = 2 * time.Second // not the interval: a busy instance is slow, not dead
)

// FailoverWindow is how long after a kill the other instances may take to
// serve every user: the load balancer's health checks' window, at interval
// (healthFails failed checks, one more interval for the check in flight,
// and the last check's timeout). Under affinity the instances check each
// other at the same interval (-peer-health-interval), and one that
// forwards to the dead owner commits the call itself at once, so the window
// is the same.
func FailoverWindow(interval time.Duration) time.Duration {
	return time.Duration(healthFails+1)*interval + healthTimeout
}

// A target is one instance behind the balancer, with what it was sent.
type target struct {
	inst *Instance
	x    drive.Executor     // sends its calls
	conn *drive.ConnectExec // x, when it is ledgerd (for the checks and notes after a run)

	mu           sync.Mutex
	out          bool      // out of service
	outAt        time.Time // when it was last taken out
	outBy        string    // what took it out: health checks, or failed calls
	outs         int       // times it was taken out
	failedCalls  int       // in a row
	failedChecks int       // in a row
	passedChecks int       // in a row, while out
	n            report.CallCounts
}

// recovered follows one user's mutations sent after the kill: the last
// one that failed for want of an instance, and how many were served after
// the health-check window.
type recovered struct {
	lastFailed  time.Duration // after the kill; < 0: none failed
	servedLater int           // sent after the window and served
	failedLater int           // sent after the window and failed
	lastLate    string        // the last of those: where it went and what it got
}

func newBalancer(targets []*target, interval time.Duration) *Balancer {
	return &Balancer{targets: targets, interval: interval, users: map[string]*recovered{}}
}

// codeNoInstance is the outcome of a call the balancer had no instance in
// service for.
const codeNoInstance = "no_instance"

func (b *Balancer) Do(ctx context.Context, o drive.Op) drive.Outcome {
	sent := time.Now()
	t := b.pick()
	out := drive.Outcome{Code: codeNoInstance, Unreachable: true, Err: "every instance was out of service"}
	where := "the balancer"
	if t != nil {
		out = t.x.Do(ctx, o)
		t.answered(o, out)
		where = t.inst.Name
	}
	b.follow(o, where, sent, out)
	return out
}

// pick returns the next instance in service, round robin; nil if none is.
// It takes one turn and looks at every instance once from there: taking a
// turn per instance looked at would let concurrent picks take the live
// instances' turns between one pick's looks, which then sees only the dead
// one and finds none.
func (b *Balancer) pick() *target {
	n := uint64(len(b.targets))
	turn := b.next.Add(1) - 1
	for i := range n {
		if t := b.targets[(turn+i)%n]; t.inService() {
			return t
		}
	}
	return nil
}

func (t *target) inService() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.out
}

// answered counts a call's outcome, and takes the instance out after
// passiveFails calls in a row that did not reach it.
func (t *target) answered(o drive.Op, out drive.Outcome) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n.Codes == nil {
		t.n.Codes = map[string]int64{}
	}
	t.n.Calls++
	t.n.Codes[out.Code]++
	if out.Code == "ok" {
		t.n.OK++
		if o.Kind == "purchase" && !out.Replayed {
			t.n.Purchases++
		}
	}
	if !out.Unreachable {
		t.failedCalls = 0
		return
	}
	t.n.Unreachable++
	if t.failedCalls++; t.failedCalls >= passiveFails && !t.out {
		t.takeOut(fmt.Sprintf("%d calls in a row that could not reach it", passiveFails))
	}
}

// takeOut takes t out of service; t.mu is held.
func (t *target) takeOut(by string) {
	t.out, t.outAt, t.outBy, t.passedChecks = true, time.Now(), by, 0
	t.outs++
}

// checked counts a health check's result, taking the instance out or
// putting it back.
func (t *target) checked(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.passedChecks = 0
		if t.failedChecks++; t.failedChecks >= healthFails && !t.out {
			t.takeOut(fmt.Sprintf("%d failed health checks in a row (the last: %v)", healthFails, err))
		}
		return
	}
	t.failedChecks = 0
	if t.passedChecks++; t.out && t.passedChecks >= healthPasses {
		t.out, t.failedCalls = false, 0
	}
}

// Watch checks every instance's health every interval until ctx ends.
func (b *Balancer) Watch(ctx context.Context, c *http.Client) {
	watching := ctx
	tick := time.NewTicker(b.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var wg sync.WaitGroup
		for _, t := range b.targets {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(ctx, healthTimeout)
				defer cancel()
				err := healthy(ctx, c, t.inst.URL)
				if watching.Err() == nil { // not cut off by the end of the watch
					t.checked(err)
				}
			})
		}
		wg.Wait()
	}
}

// counts returns each instance's counts so far.
func (b *Balancer) counts() []report.CallCounts {
	out := make([]report.CallCounts, len(b.targets))
	for i, t := range b.targets {
		t.mu.Lock()
		out[i] = t.n.Clone()
		t.mu.Unlock()
	}
	return out
}

// killed notes that an instance was killed at at: from then on, the
// balancer follows each user's mutations, which must all be served once
// window has passed.
func (b *Balancer) killed(at time.Time, window time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.killAt, b.window = at, window
	b.afterKill.Store(true)
}

// failedForWant says whether a call failed for want of an instance to
// serve it: it could not reach one, or one answered unavailable (one that
// could not reach the owner it forwards to, say). Any other answer is the
// ledger's, aborted after conflicts among them.
func failedForWant(out drive.Outcome) bool { return out.Unreachable || out.Code == "unavailable" }

// follow notes, after a kill, which of each user's mutations failed for
// want of an instance, when they were sent, and (for those after the
// window) where they went and what they got.
func (b *Balancer) follow(o drive.Op, where string, sent time.Time, out drive.Outcome) {
	if !o.Mutates() || !b.afterKill.Load() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.killAt.IsZero() || sent.Before(b.killAt) {
		return
	}
	after := sent.Sub(b.killAt)
	r, ok := b.users[o.User]
	if !ok {
		r = &recovered{lastFailed: -1}
		b.users[o.User] = r
	}
	failed := failedForWant(out)
	if failed {
		r.lastFailed = max(r.lastFailed, after)
	}
	if after > b.window {
		if failed {
			r.failedLater++
			r.lastLate = fmt.Sprintf("%s answered %s (%s)", where, out.Code, out.Err)
		} else {
			r.servedLater++
		}
	}
}

// failover is what the balancer saw of t's kill: when it came (after
// begin), when t was taken out, and whether every user was served once the
// window had passed.
func (b *Balancer) failover(t *target, unreachableAtKill int64, begin time.Time) report.Kill {
	b.mu.Lock()
	defer b.mu.Unlock()
	t.mu.Lock()
	k := report.Kill{Instance: t.inst.Name, AtS: b.killAt.Sub(begin).Seconds(), TakenOutBy: t.outBy, WindowMS: msOfDuration(b.window), TakenOutAfterMS: -1,
		FailedCalls: t.n.Unreachable - unreachableAtKill, LastFailureMS: -1}
	if t.out && !t.outAt.Before(b.killAt) {
		k.TakenOutAfterMS = msOfDuration(t.outAt.Sub(b.killAt))
	}
	t.mu.Unlock()
	for _, user := range slices.Sorted(maps.Keys(b.users)) {
		r := b.users[user]
		k.Users++
		k.ServedLater += r.servedLater
		if r.lastFailed >= 0 {
			k.LastFailureMS = max(k.LastFailureMS, msOfDuration(r.lastFailed))
		}
		if r.failedLater > 0 {
			k.Late = append(k.Late, fmt.Sprintf("%s: %d mutations sent more than %s after the kill failed for want of an instance, the last %s after it: %s",
				user, r.failedLater, b.window, r.lastFailed.Round(time.Millisecond), r.lastLate))
		}
	}
	return k
}

func msOfDuration(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Client is a client of an instance in service, for the checks and notes
// that ask ledgerd after the run.
func (b *Balancer) Client() pointledgerv1connect.LedgerServiceClient {
	if t := b.pick(); t != nil {
		return t.conn.Client()
	}
	return b.targets[0].conn.Client()
}

// LastSpent is the last acknowledged purchase or capture, whichever
// instance answered it.
func (b *Balancer) LastSpent() *pb.Entry {
	var last *pb.Entry
	for _, t := range b.targets {
		if e := t.conn.LastSpent(); e != nil && (last == nil || e.CreateTime.AsTime().After(last.CreateTime.AsTime())) {
			last = e
		}
	}
	return last
}

// URL is the API of an instance in service, for calls after the run
// (deleting its webhook endpoint); "" when none is.
func (b *Balancer) URL() string {
	if t := b.pick(); t != nil {
		return t.inst.URL
	}
	return ""
}

// OpsURL is the operations listener of an instance in service, for the
// projection's status.
func (b *Balancer) OpsURL() string {
	if t := b.pick(); t != nil {
		return t.inst.OpsURL
	}
	return ""
}
