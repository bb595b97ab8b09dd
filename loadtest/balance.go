package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// A balancer is the load balancer in front of a fleet, played by the load
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
type balancer struct {
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

// A target is one instance behind the balancer, with what it was sent.
type target struct {
	inst *instance
	x    executor     // sends its calls
	conn *connectExec // x, when it is ledgerd (for the checks and notes after a run)

	mu           sync.Mutex
	out          bool      // out of service
	outAt        time.Time // when it was last taken out
	outBy        string    // what took it out: health checks, or failed calls
	outs         int       // times it was taken out
	failedCalls  int       // in a row
	failedChecks int       // in a row
	passedChecks int       // in a row, while out
	n            targetCounts
}

// targetCounts are what one instance was sent and answered, counted from
// the start; a run's are the difference over its measurement.
type targetCounts struct {
	calls, ok, purchases, unreachable int64
	codes                             map[string]int64
}

func (c targetCounts) clone() targetCounts {
	c.codes = maps.Clone(c.codes)
	return c
}

// minus is what was counted after before.
func (c targetCounts) minus(before targetCounts) targetCounts {
	d := targetCounts{calls: c.calls - before.calls, ok: c.ok - before.ok, purchases: c.purchases - before.purchases,
		unreachable: c.unreachable - before.unreachable, codes: map[string]int64{}}
	for code, n := range c.codes {
		if n -= before.codes[code]; n != 0 {
			d.codes[code] = n
		}
	}
	return d
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

func newBalancer(targets []*target, interval time.Duration) *balancer {
	return &balancer{targets: targets, interval: interval, users: map[string]*recovered{}}
}

// codeNoInstance is the outcome of a call the balancer had no instance in
// service for.
const codeNoInstance = "no_instance"

func (b *balancer) do(ctx context.Context, o op) outcome {
	sent := time.Now()
	t := b.pick()
	out := outcome{code: codeNoInstance, unreachable: true, err: "every instance was out of service"}
	where := "the balancer"
	if t != nil {
		out = t.x.do(ctx, o)
		t.answered(o, out)
		where = t.inst.name
	}
	b.follow(o, where, sent, out)
	return out
}

// pick returns the next instance in service, round robin; nil if none is.
// It takes one turn and looks at every instance once from there: taking a
// turn per instance looked at would let concurrent picks take the live
// instances' turns between one pick's looks, which then sees only the dead
// one and finds none.
func (b *balancer) pick() *target {
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
func (t *target) answered(o op, out outcome) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n.codes == nil {
		t.n.codes = map[string]int64{}
	}
	t.n.calls++
	t.n.codes[out.code]++
	if out.code == "ok" {
		t.n.ok++
		if o.kind == "purchase" && !out.replayed {
			t.n.purchases++
		}
	}
	if !out.unreachable {
		t.failedCalls = 0
		return
	}
	t.n.unreachable++
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

// watch checks every instance's health every interval until ctx ends.
func (b *balancer) watch(ctx context.Context, c *http.Client) {
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
				err := healthy(ctx, c, t.inst.url)
				if watching.Err() == nil { // not cut off by the end of the watch
					t.checked(err)
				}
			})
		}
		wg.Wait()
	}
}

// counts returns each instance's counts so far.
func (b *balancer) counts() []targetCounts {
	out := make([]targetCounts, len(b.targets))
	for i, t := range b.targets {
		t.mu.Lock()
		out[i] = t.n.clone()
		t.mu.Unlock()
	}
	return out
}

// killed notes that an instance was killed at at: from then on, the
// balancer follows each user's mutations, which must all be served once
// window has passed.
func (b *balancer) killed(at time.Time, window time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.killAt, b.window = at, window
	b.afterKill.Store(true)
}

// failedForWant says whether a call failed for want of an instance to
// serve it: it could not reach one, or one answered unavailable (one that
// could not reach the owner it forwards to, say). Any other answer is the
// ledger's, aborted after conflicts among them.
func failedForWant(out outcome) bool { return out.unreachable || out.code == "unavailable" }

// follow notes, after a kill, which of each user's mutations failed for
// want of an instance, when they were sent, and (for those after the
// window) where they went and what they got.
func (b *balancer) follow(o op, where string, sent time.Time, out outcome) {
	if !o.mutates() || !b.afterKill.Load() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.killAt.IsZero() || sent.Before(b.killAt) {
		return
	}
	after := sent.Sub(b.killAt)
	r, ok := b.users[o.user]
	if !ok {
		r = &recovered{lastFailed: -1}
		b.users[o.user] = r
	}
	failed := failedForWant(out)
	if failed {
		r.lastFailed = max(r.lastFailed, after)
	}
	if after > b.window {
		if failed {
			r.failedLater++
			r.lastLate = fmt.Sprintf("%s answered %s (%s)", where, out.code, out.err)
		} else {
			r.servedLater++
		}
	}
}

// failover is what the balancer saw of t's kill: when t was taken out, and
// whether every user was served once the window had passed.
func (b *balancer) failover(t *target, unreachableAtKill int64) Kill {
	b.mu.Lock()
	defer b.mu.Unlock()
	t.mu.Lock()
	k := Kill{Instance: t.inst.name, TakenOutBy: t.outBy, WindowMS: msOfDuration(b.window), TakenOutAfterMS: -1,
		FailedCalls: t.n.unreachable - unreachableAtKill, LastFailureMS: -1}
	if t.out && !t.outAt.Before(b.killAt) {
		k.TakenOutAfterMS = msOfDuration(t.outAt.Sub(b.killAt))
	}
	t.mu.Unlock()
	for _, user := range sortedKeys(b.users) {
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
