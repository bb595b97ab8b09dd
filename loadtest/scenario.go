package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shopspring/decimal"
)

// An op is one request of the load.
type op struct {
	kind      string // grant, purchase, refund, authorize, capture, void, balance, history
	user      string
	requestID string
	amount    decimal.Decimal // capture: what it spends; void: what the hold holds
	purchase  string          // refund: the purchase's request id
	hold      string          // capture, void: the request id of the hold's Authorize
	ttl       time.Duration   // grant, authorize: how long the points or the hold last; 0: not said
	whole     bool            // capture: send no amount, which captures all of the hold (amount)
	expect    string          // a code the scenario expects instead of "ok" (a probe)
}

// mutates says whether the op writes to the ledger.
func (o op) mutates() bool {
	_, ok := entryTypeOf[o.kind]
	return ok
}

// An outcome is what the system answered.
type outcome struct {
	code     string // "ok" or a Connect code ("failed_precondition", ...)
	entryID  string // mutations: the entry written (or replayed)
	version  int64
	replayed bool      // the answer to a request id seen before
	expire   time.Time // authorize: when its hold lets go
	// unreachable: the call did not reach ledgerd, or lost its connection
	// before the answer (refused, reset, closed): what a load balancer's
	// passive health check counts.
	unreachable bool
	err         string // a failed call's error, for the report of a failover
}

// An executor sends ops: ledgerd over Connect, or a baseline straight to
// DynamoDB.
type executor interface {
	do(ctx context.Context, o op) outcome
}

// A scenario makes the load: setup before the clock starts, then steps. A
// step is one op, or a few sent together (a burst of retries, a round of
// parallel spends); send records each.
type scenario interface {
	setup(ctx context.Context, send sender) error
	step(ctx context.Context, rng *rand.Rand, send sender)
}

// sender sends one op, records its latency and outcome, and returns it.
type sender func(ctx context.Context, o op) outcome

// params are the scenario flags.
type params struct {
	users   int
	amount  decimal.Decimal
	grant   decimal.Decimal
	spends  int // double-spend: parallel spends a round
	covers  int // double-spend: how many of them the balance covers
	mix     map[string]int
	runID   string
	runFor  time.Duration // from the end of the setup: warm-up and measurement
	ids     *atomic.Int64 // request ids of this process, shared by copies
	userTag string        // distinguishes the users of one run (service, baselines)
}

func (p *params) newID(prefix string) string {
	return fmt.Sprintf("%s-%s-%d", prefix, p.runID, p.ids.Add(1))
}

func (p *params) userName(i int) string { return fmt.Sprintf("lt-%s-%s-%d", p.runID, p.userTag, i) }

// grantAll grants p.grant to users 0..n-1.
func (p *params) grantAll(ctx context.Context, send sender, n int) error {
	return seed(ctx, send, n, func(i int) []op {
		return []op{{kind: "grant", user: p.userName(i), requestID: "grant-" + p.userName(i), amount: p.grant}}
	})
}

// seed sends the grants of users 0..n-1, 16 users at a time, and fails if
// any was not acknowledged.
func seed(ctx context.Context, send sender, n int, grants func(user int) []op) error {
	var failed atomic.Int64
	var first atomic.Value
	parallelDo(ctx, 16, n, func(i int) {
		for _, o := range grants(i) {
			if out := send(ctx, o); out.code != "ok" {
				failed.Add(1)
				first.CompareAndSwap(nil, fmt.Sprintf("grant to %s: %s", o.user, out.code))
			}
		}
	})
	if failed.Load() > 0 {
		return fmt.Errorf("%d grants failed, first: %v", failed.Load(), first.Load())
	}
	return nil
}

// spread: purchases on users picked by pick (uniform, zipf, hot).
type spread struct {
	p    *params
	pick func(*rand.Rand) int
}

func (s *spread) setup(ctx context.Context, send sender) error {
	return s.p.grantAll(ctx, send, s.p.users)
}

func (s *spread) step(ctx context.Context, rng *rand.Rand, send sender) {
	send(ctx, op{kind: "purchase", user: s.p.userName(s.pick(rng)), requestID: s.p.newID("p"), amount: s.p.amount})
}

// doubleSpend: each step is a round on a fresh user granted covers x amount,
// who then gets spends purchases of amount at once. At most covers may
// succeed; the check counts the round's acknowledged purchases.
type doubleSpend struct {
	p      *params
	rounds atomic.Int64
	mu     sync.Mutex
	covers map[string]int // user -> purchases its grant covers
}

func (d *doubleSpend) setup(context.Context, sender) error { return nil }

func (d *doubleSpend) step(ctx context.Context, _ *rand.Rand, send sender) {
	user := d.p.userName(int(d.rounds.Add(1)))
	grant := d.p.amount.Mul(decimal.NewFromInt(int64(d.p.covers)))
	if out := send(ctx, op{kind: "grant", user: user, requestID: "grant-" + user, amount: grant}); out.code != "ok" {
		return
	}
	d.mu.Lock()
	d.covers[user] = d.p.covers
	d.mu.Unlock()
	ctx = context.WithValue(ctx, sentAfterKey{}, true) // the purchases' latency leaves the grant out
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range d.p.spends {
		id := d.p.newID("ds")
		wg.Go(func() {
			<-start
			send(ctx, op{kind: "purchase", user: user, requestID: id, amount: d.p.amount})
		})
	}
	close(start) // all at once
	wg.Wait()
}

// retryStorm re-sends request ids: new purchases (some as a burst of
// concurrent copies), re-sends of recent ones (possibly while another
// client re-sends it too), and a few reuses of an id with another amount,
// which must be refused with ALREADY_EXISTS.
type retryStorm struct {
	p      *params
	mu     sync.Mutex
	recent []op // a ring of recent purchases
	next   int
}

const stormRing = 256

func (r *retryStorm) setup(ctx context.Context, send sender) error {
	return r.p.grantAll(ctx, send, r.p.users)
}

func (r *retryStorm) remember(o op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.recent) < stormRing {
		r.recent = append(r.recent, o)
		return
	}
	r.recent[r.next] = o
	r.next = (r.next + 1) % stormRing
}

func (r *retryStorm) pickRecent(rng *rand.Rand) (op, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.recent) == 0 {
		return op{}, false
	}
	return r.recent[rng.IntN(len(r.recent))], true
}

func (r *retryStorm) step(ctx context.Context, rng *rand.Rand, send sender) {
	x := rng.Float64()
	if old, ok := r.pickRecent(rng); ok && x >= 0.4 {
		if x >= 0.98 { // the same id, another amount: a client bug the ledger must refuse
			old.amount = old.amount.Add(r.p.amount)
			old.expect = "already_exists"
		}
		send(ctx, old)
		return
	}
	o := op{kind: "purchase", user: r.p.userName(rng.IntN(r.p.users)), requestID: r.p.newID("rs"), amount: r.p.amount}
	copies := 1
	if x < 0.1 {
		copies = 4 // sent four times at once
	}
	var wg sync.WaitGroup
	for range copies {
		wg.Go(func() { send(ctx, o) })
	}
	wg.Wait()
	r.remember(o)
}

// mixed: grants, purchases, refunds, balance and history reads in the
// proportions of -mix, over uniform users.
type mixed struct {
	p        *params
	kinds    []string
	weights  []int
	total    int
	mu       sync.Mutex
	refundOf []op // acknowledged purchases not refunded yet
}

func newMixed(p *params) *mixed {
	m := &mixed{p: p}
	for _, k := range sortedKeys(p.mix) {
		m.kinds = append(m.kinds, k)
		m.weights = append(m.weights, p.mix[k])
		m.total += p.mix[k]
	}
	return m
}

func (m *mixed) setup(ctx context.Context, send sender) error {
	return m.p.grantAll(ctx, send, m.p.users)
}

func (m *mixed) step(ctx context.Context, rng *rand.Rand, send sender) {
	x := rng.IntN(m.total)
	kind := m.kinds[len(m.kinds)-1]
	for i, w := range m.weights {
		if x < w {
			kind = m.kinds[i]
			break
		}
		x -= w
	}
	user := m.p.userName(rng.IntN(m.p.users))
	switch kind {
	case "grant":
		send(ctx, op{kind: "grant", user: user, requestID: m.p.newID("g"), amount: m.p.amount.Mul(decimal.NewFromInt(10))})
	case "refund":
		m.mu.Lock()
		if len(m.refundOf) == 0 {
			m.mu.Unlock()
			kind = "purchase"
			break
		}
		i := rng.IntN(len(m.refundOf))
		p := m.refundOf[i]
		m.refundOf[i] = m.refundOf[len(m.refundOf)-1]
		m.refundOf = m.refundOf[:len(m.refundOf)-1]
		m.mu.Unlock()
		send(ctx, op{kind: "refund", user: p.user, requestID: m.p.newID("r"), amount: p.amount, purchase: p.requestID})
		return
	case "balance", "history":
		send(ctx, op{kind: kind, user: user})
		return
	}
	if kind == "purchase" {
		o := op{kind: "purchase", user: user, requestID: m.p.newID("p"), amount: m.p.amount}
		if send(ctx, o).code == "ok" {
			m.mu.Lock()
			m.refundOf = append(m.refundOf, o)
			m.mu.Unlock()
		}
	}
}

// parseMix reads "purchase=60,grant=5,...".
func parseMix(s string) (map[string]int, error) {
	mix := map[string]int{}
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < 0 {
			return nil, fmt.Errorf("-mix %q: want kind=weight,... with weights >= 0", s)
		}
		if !slices.Contains([]string{"grant", "purchase", "refund", "balance", "history"}, k) {
			return nil, fmt.Errorf("-mix: unknown kind %q (grant, purchase, refund, balance, history)", k)
		}
		mix[k] = n
	}
	total := 0
	for _, n := range mix {
		total += n
	}
	if total == 0 {
		return nil, fmt.Errorf("-mix %q: the weights sum to 0", s)
	}
	return mix, nil
}

// pickUniform picks any of n users alike.
func pickUniform(n int) func(*rand.Rand) int {
	return func(rng *rand.Rand) int { return rng.IntN(n) }
}

// pickZipf picks user k (from 0) with probability proportional to 1/(k+1):
// Zipf's law with exponent 1.0, where a few users take most purchases.
func pickZipf(n int) func(*rand.Rand) int {
	cdf := make([]float64, n)
	sum := 0.0
	for k := range n {
		sum += 1 / float64(k+1)
		cdf[k] = sum
	}
	return func(rng *rand.Rand) int {
		x := rng.Float64() * sum
		k, _ := slices.BinarySearch(cdf, x)
		return min(k, n-1)
	}
}

// newScenario builds the scenario name; baseline: the variant a baseline
// runs, which only grants and purchases (mixed, retry-storm and checkout
// become uniform purchases).
func newScenario(name string, p *params, baseline bool) scenario {
	if baseline && (name == "mixed" || name == "retry-storm" || name == "checkout") {
		name = "uniform"
	}
	switch name {
	case "zipf":
		return &spread{p, pickZipf(p.users)}
	case "hot":
		return &spread{p, pickUniform(1)}
	case "double-spend":
		return &doubleSpend{p: p, covers: map[string]int{}}
	case "retry-storm":
		return &retryStorm{p: p}
	case "mixed":
		return newMixed(p)
	case "checkout":
		return &checkout{p: p}
	}
	return &spread{p, pickUniform(p.users)}
}

var scenarios = []string{"uniform", "zipf", "hot", "double-spend", "retry-storm", "mixed", "checkout"}

// parallelDo runs f(0..n-1) on k goroutines.
func parallelDo(ctx context.Context, k, n int, f func(int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range k {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				f(i)
			}
		})
	}
	wg.Wait()
}
