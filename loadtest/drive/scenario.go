// Package drive makes a load test's load: the scenarios' steps, sent in a
// closed or an open loop through an Executor (ledgerd over Connect, a
// baseline, the load balancer), with each op's latency and outcome
// recorded for the report.
package drive

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
)

// An Op is one request of the load.
type Op struct {
	Kind      string // grant, purchase, refund, authorize, capture, void, reverse, balance, history
	User      string
	RequestID string
	Amount    decimal.Decimal // capture: what it spends; void: what the hold holds
	Purchase  string          // refund: the purchase's request id
	Hold      string          // capture, void: the request id of the hold's Authorize
	TTL       time.Duration   // grant, authorize: how long the points or the hold last; 0: not said
	Effective time.Duration   // grant: pending for this long (effective_delay); 0: spendable at once
	Grant     string          // reverse: the grant's request id
	Whole     bool            // capture: send no amount, which captures all of the hold (Amount)
	Expect    string          // a code the scenario expects instead of "ok" (a probe)
	Budget    string          // grant: the budget it draws on (campaign)
	PointKind string          // grant: the kind of its points ("": standard)
	Merchant  string          // purchase, authorize: the merchant_id it spends at ("": none said)
	Category  string          // purchase, authorize: the category it spends in ("": none said)
}

// Mutates says whether the op writes to the ledger.
func (o Op) Mutates() bool {
	_, ok := o.EntryType()
	return ok
}

// EntryType is the type of the entry the op asks for; ok is false for an
// op that writes none (a read).
func (o Op) EntryType() (t ledger.EntryType, ok bool) {
	t, ok = entryTypeOf[o.Kind]
	return t, ok
}

// entryTypeOf is the entry each kind of op the load test sends asks for.
var entryTypeOf = map[string]ledger.EntryType{
	"grant": ledger.EntryGrant, "purchase": ledger.EntryPurchase, "refund": ledger.EntryRefund,
	"authorize": ledger.EntryHold, "capture": ledger.EntryCapture, "void": ledger.EntryRelease,
	"reverse": ledger.EntryReversal,
}

// An Outcome is what the system answered.
type Outcome struct {
	Code     string // "ok" or a Connect code ("failed_precondition", ...)
	EntryID  string // mutations: the entry written (or replayed)
	Version  int64
	Replayed bool      // the answer to a request id seen before
	Expire   time.Time // authorize: when its hold lets go
	// unreachable: the call did not reach ledgerd, or lost its connection
	// before the answer (refused, reset, closed): what a load balancer's
	// passive health check counts.
	Unreachable bool
	Err         string // a failed call's error, for the report of a failover
	Reason      string // a refusal's reason (its ErrorInfo): BUDGET_EXHAUSTED, ...
}

// An Executor sends ops: ledgerd over Connect, or a baseline straight to
// DynamoDB.
type Executor interface {
	Do(ctx context.Context, o Op) Outcome
}

// A Scenario makes the load: Setup before the clock starts, then Steps. A
// step is one op, or a few sent together (a burst of retries, a round of
// parallel spends); send records each.
type Scenario interface {
	Setup(ctx context.Context, send Sender) error
	Step(ctx context.Context, rng *rand.Rand, send Sender)
}

// Sender sends one op, records its latency and outcome, and returns it.
type Sender func(ctx context.Context, o Op) Outcome

// Params are the scenario flags.
type Params struct {
	Users   int
	Amount  decimal.Decimal
	Grant   decimal.Decimal
	Spends  int // double-spend: parallel spends a round
	Covers  int // double-spend: how many of them the balance covers
	Mix     map[string]int
	RunID   string
	RunFor  time.Duration // from the end of the setup: warm-up and measurement
	IDs     *atomic.Int64 // request ids of this process, shared by copies
	UserTag string        // distinguishes the users of one run (service, baselines)
	// Campaign: the campaign scenario's budget, set for each of its runs.
	Campaign *Campaign
	// Kinds: the kinds scenario's point kinds, set for each of its runs.
	Kinds *Kinds
}

func (p *Params) newID(prefix string) string {
	return fmt.Sprintf("%s-%s-%d", prefix, p.RunID, p.IDs.Add(1))
}

func (p *Params) userName(i int) string { return fmt.Sprintf("lt-%s-%s-%d", p.RunID, p.UserTag, i) }

// grantAll grants p.grant to users 0..n-1.
func (p *Params) grantAll(ctx context.Context, send Sender, n int) error {
	return seed(ctx, send, n, func(i int) []Op {
		return []Op{{Kind: "grant", User: p.userName(i), RequestID: "grant-" + p.userName(i), Amount: p.Grant}}
	})
}

// seed sends the grants of users 0..n-1, 16 users at a time, and fails if
// any was not acknowledged.
func seed(ctx context.Context, send Sender, n int, grants func(user int) []Op) error {
	var failed atomic.Int64
	var first atomic.Value
	parallelDo(ctx, 16, n, func(i int) {
		for _, o := range grants(i) {
			if out := send(ctx, o); out.Code != "ok" {
				failed.Add(1)
				first.CompareAndSwap(nil, fmt.Sprintf("grant to %s: %s", o.User, out.Code))
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
	p    *Params
	pick func(*rand.Rand) int
}

// With p.Kinds (-kinds), the users also hold points of the kinds
// scenario's kinds, and each purchase spends at a merchant and in a
// category as the kinds scenario's do: the same load, with kinds in use.
func (s *spread) Setup(ctx context.Context, send Sender) error {
	if s.p.Kinds != nil {
		return s.p.setupKinds(ctx, send)
	}
	return s.p.grantAll(ctx, send, s.p.Users)
}

func (s *spread) Step(ctx context.Context, rng *rand.Rand, send Sender) {
	o := Op{Kind: "purchase", User: s.p.userName(s.pick(rng)), RequestID: s.p.newID("p"), Amount: s.p.Amount}
	if s.p.Kinds == nil {
		send(ctx, o)
		return
	}
	o.Merchant, o.Category = where(rng)
	s.p.Kinds.refused(send(ctx, o))
}

// doubleSpend: each step is a round on a fresh user granted covers x amount,
// who then gets spends purchases of amount at once. At most covers may
// succeed; the check counts the round's acknowledged purchases.
type doubleSpend struct {
	p      *Params
	rounds atomic.Int64
	mu     sync.Mutex
	covers map[string]int // user -> purchases its grant covers
}

func (d *doubleSpend) Setup(context.Context, Sender) error { return nil }

func (d *doubleSpend) Step(ctx context.Context, _ *rand.Rand, send Sender) {
	user := d.p.userName(int(d.rounds.Add(1)))
	grant := d.p.Amount.Mul(decimal.NewFromInt(int64(d.p.Covers)))
	if out := send(ctx, Op{Kind: "grant", User: user, RequestID: "grant-" + user, Amount: grant}); out.Code != "ok" {
		return
	}
	d.mu.Lock()
	d.covers[user] = d.p.Covers
	d.mu.Unlock()
	ctx = context.WithValue(ctx, sentAfterKey{}, true) // the purchases' latency leaves the grant out
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range d.p.Spends {
		id := d.p.newID("ds")
		wg.Go(func() {
			<-start
			send(ctx, Op{Kind: "purchase", User: user, RequestID: id, Amount: d.p.Amount})
		})
	}
	close(start) // all at once
	wg.Wait()
}

// Covers is, for a double-spend scenario, how many purchases each round's
// grant covered, by the round's user: the most it may commit. Other
// scenarios have none.
func Covers(s Scenario) map[string]int {
	d, ok := s.(*doubleSpend)
	if !ok {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.covers)
}

// retryStorm re-sends request ids: new purchases (some as a burst of
// concurrent copies), re-sends of recent ones (possibly while another
// client re-sends it too), and a few reuses of an id with another amount,
// which must be refused with ALREADY_EXISTS.
type retryStorm struct {
	p      *Params
	mu     sync.Mutex
	recent []Op // a ring of recent purchases
	next   int
}

const stormRing = 256

func (r *retryStorm) Setup(ctx context.Context, send Sender) error {
	return r.p.grantAll(ctx, send, r.p.Users)
}

func (r *retryStorm) remember(o Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.recent) < stormRing {
		r.recent = append(r.recent, o)
		return
	}
	r.recent[r.next] = o
	r.next = (r.next + 1) % stormRing
}

func (r *retryStorm) pickRecent(rng *rand.Rand) (Op, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.recent) == 0 {
		return Op{}, false
	}
	return r.recent[rng.IntN(len(r.recent))], true
}

func (r *retryStorm) Step(ctx context.Context, rng *rand.Rand, send Sender) {
	x := rng.Float64()
	if old, ok := r.pickRecent(rng); ok && x >= 0.4 {
		if x >= 0.98 { // the same id, another amount: a client bug the ledger must refuse
			old.Amount = old.Amount.Add(r.p.Amount)
			old.Expect = "already_exists"
		}
		send(ctx, old)
		return
	}
	o := Op{Kind: "purchase", User: r.p.userName(rng.IntN(r.p.Users)), RequestID: r.p.newID("rs"), Amount: r.p.Amount}
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
	p        *Params
	kinds    []string
	weights  []int
	total    int
	mu       sync.Mutex
	refundOf []Op // acknowledged purchases not refunded yet
}

func newMixed(p *Params) *mixed {
	m := &mixed{p: p}
	for _, k := range slices.Sorted(maps.Keys(p.Mix)) {
		m.kinds = append(m.kinds, k)
		m.weights = append(m.weights, p.Mix[k])
		m.total += p.Mix[k]
	}
	return m
}

func (m *mixed) Setup(ctx context.Context, send Sender) error {
	return m.p.grantAll(ctx, send, m.p.Users)
}

func (m *mixed) Step(ctx context.Context, rng *rand.Rand, send Sender) {
	x := rng.IntN(m.total)
	kind := m.kinds[len(m.kinds)-1]
	for i, w := range m.weights {
		if x < w {
			kind = m.kinds[i]
			break
		}
		x -= w
	}
	user := m.p.userName(rng.IntN(m.p.Users))
	switch kind {
	case "grant":
		send(ctx, Op{Kind: "grant", User: user, RequestID: m.p.newID("g"), Amount: m.p.Amount.Mul(decimal.NewFromInt(10))})
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
		send(ctx, Op{Kind: "refund", User: p.User, RequestID: m.p.newID("r"), Amount: p.Amount, Purchase: p.RequestID})
		return
	case "balance", "history":
		send(ctx, Op{Kind: kind, User: user})
		return
	}
	if kind == "purchase" {
		o := Op{Kind: "purchase", User: user, RequestID: m.p.newID("p"), Amount: m.p.Amount}
		if send(ctx, o).Code == "ok" {
			m.mu.Lock()
			m.refundOf = append(m.refundOf, o)
			m.mu.Unlock()
		}
	}
}

// ParseMix reads "purchase=60,grant=5,...".
func ParseMix(s string) (map[string]int, error) {
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

// NewScenario builds the scenario name; baseline: the variant a baseline
// runs, which only grants and purchases (mixed, retry-storm, checkout and
// returns, campaign and kinds become uniform purchases).
func NewScenario(name string, p *Params, baseline bool) Scenario {
	if baseline && (name == "mixed" || name == "retry-storm" || name == "checkout" || name == "returns" || name == "campaign" || name == "kinds") {
		name = "uniform"
	}
	switch name {
	case "zipf":
		return &spread{p, pickZipf(p.Users)}
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
	case "returns":
		return &returns{p: p, grants: map[string][]Op{}}
	case "campaign":
		return &campaign{p: p}
	case "kinds":
		return &kindsScenario{p: p}
	}
	return &spread{p, pickUniform(p.Users)}
}

// Scenarios are the names NewScenario knows.
var Scenarios = []string{"uniform", "zipf", "hot", "double-spend", "retry-storm", "mixed", "checkout", "returns", "campaign", "kinds"}

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
