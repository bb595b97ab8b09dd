// Package dynamo stores the ledger in one DynamoDB table (single-table
// design; see migrations/) and implements its write path (write.go, with
// the facts it reads in facts.go, the transaction it builds in txn.go, a
// busy user's next group planned while the last one commits in ahead.go,
// and its cancellations decoded in cancel.go) and consistent reads
// (read.go). The invariants it keeps are those of package ledger: write.go
// says how ("What must hold, and how").
package dynamo

import (
	"cmp"
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/oklog/ulid/v2"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/pagetoken"
)

// API is the part of the DynamoDB client the ledger uses. *dynamodb.Client
// implements it; tests wrap it to inject faults DynamoDB Local cannot produce.
type API interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	// TransactGetItems reads a budget's shards at one moment (budget.go).
	TransactGetItems(ctx context.Context, in *dynamodb.TransactGetItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactGetItemsOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Options configure a Ledger. Only Table is required.
type Options struct {
	Table   string           // the ledger table's full name
	Retry   Retry            // zero: DefaultRetry
	Now     func() time.Time // zero: time.Now
	Entropy io.Reader        // randomness of entry ids; zero: crypto/rand
	Logger  *slog.Logger     // zero: slog.Default()

	// Group commit (see write.go): at most MaxBatch mutations of one user per
	// transaction (0: DefaultMaxBatch; 1: no grouping, and no group planned
	// ahead: one mutation a round trip), each group gathered for Linger
	// first (0: a group is whatever queued while the previous one
	// committed, planned while it was in flight: ahead.go; with a linger,
	// each group is planned after the one before it has committed).
	MaxBatch int
	Linger   time.Duration

	// Observer is told what the write path does (groups committed, attempts
	// retried), for metrics; nil: no one is told.
	Observer Observer

	// PageTokens makes and checks ListEntries' page tokens; nil: a codec
	// derived from Table (pagetoken.Derived), which is no secret.
	PageTokens *pagetoken.Codec

	// MaxBuckets bounds the expiry times one account holds; 0:
	// ledger.DefaultMaxBuckets.
	MaxBuckets int
	// MaxHolds bounds a user's open holds; 0: ledger.DefaultMaxHolds. They
	// live in the account item, which every mutation of the user rewrites:
	// each costs it some 150 bytes, and more with draws on many buckets.
	MaxHolds int
	// MaxPending bounds a user's pending grants; 0:
	// ledger.DefaultMaxPending. They live in the account item, as holds do.
	MaxPending int

	// BudgetGrowth says when a budget's shards grow for throttles
	// (budget_growth.go); zero: DefaultBudgetGrowth.
	BudgetGrowth BudgetGrowth

	// KindRefresh is how often the Ledger reads the point kinds again
	// (kind.go): a change of a kind applies within twice it. 0:
	// DefaultKindRefresh; at most MaxKindRefresh.
	KindRefresh time.Duration
	// MaxKinds bounds the program's point kinds; 0: ledger.DefaultMaxKinds.
	MaxKinds int
}

// Observer watches the write path. Its methods are called on the write
// path's goroutines and must return quickly.
type Observer interface {
	// GroupCommitted: one transaction committed mutations mutations, as
	// entries or as recorded refusals (1 without group commit).
	GroupCommitted(mutations int)
	// Retried: an attempt lost a race and is tried again, for reason
	// RetryTransactionConflict, RetryVersionMoved, RetryThrottled or
	// RetryStaleCache.
	Retried(reason string)
	// BudgetGrown: a budget's shards grew from from to to, for throttles
	// (budget_growth.go).
	BudgetGrown(from, to int)
}

// Why the write path tries a group again.
const (
	RetryTransactionConflict = "transaction_conflict" // DynamoDB cancelled it for a concurrent transaction
	RetryVersionMoved        = "version_moved"        // another writer moved the account's version
	RetryThrottled           = "throttled"            // DynamoDB refused it for capacity
	RetryStaleCache          = "stale_cache"          // a refund planned on the cache named a purchase past it
)

// noObserver is the Observer of a Ledger given none.
type noObserver struct{}

func (noObserver) GroupCommitted(int)   {}
func (noObserver) Retried(string)       {}
func (noObserver) BudgetGrown(int, int) {}

// DefaultMaxBatch fills the 100 items of a transaction: an account update,
// room for the index of next expiries and a snapshot (indexReserve) and two items a
// mutation. A refund, an authorization, a capture or a void takes three, an
// expiration before a mutation one more and a release of an expired hold
// two, and planning closes a group early when the next mutation would not
// fit, so such groups are smaller. (Items are small, a few hundred bytes to
// under 4 KB with the most metadata validation allows and 100 buckets, and
// the account some 150 bytes more for each open hold, so 100 of them stay
// far under the transaction's 4 MB.)
const DefaultMaxBatch = (maxTxItems - 1 - indexReserve) / 2

// maxTxItems is DynamoDB's limit of items in one TransactWriteItems.
const maxTxItems = 100

// Ledger reads and writes users' ledgers in one DynamoDB table.
type Ledger struct {
	db         API
	table      string
	retry      Retry
	now        func() time.Time
	log        *slog.Logger
	maxBatch   int
	maxBuckets int
	maxHolds   int
	maxPending int
	linger     time.Duration
	queues     queues
	groupCtx   atomic.Pointer[sharedContext] // write.go
	observe    Observer
	tokens     *pagetoken.Codec

	accountsMu sync.Mutex
	accounts   map[string]ledger.Account // cached aggregates of recently busy users

	idMu    sync.Mutex
	entropy *ulid.MonotonicEntropy
	id      ulid.ULID // newID's, under idMu: the entropy's reader makes its bytes escape

	budgetShardCounts sync.Map // budget id -> its shards as last read or grown (budget.go)
	budgetThrottles   sync.Map // budget id -> *budgetThrottles (budget_growth.go)
	growth            BudgetGrowth

	kinds kindCache // kind.go
}

// New returns a Ledger on db.
func New(db API, o Options) *Ledger {
	if o.Retry.MaxAttempts < 1 {
		o.Retry.Backoff = DefaultRetry.Backoff
	}
	if o.Retry.Throttled.MaxAttempts < 1 {
		o.Retry.Throttled = DefaultRetry.Throttled
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Entropy == nil {
		o.Entropy = rand.Reader
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.Observer == nil {
		o.Observer = noObserver{}
	}
	if o.PageTokens == nil {
		o.PageTokens = pagetoken.Derived(o.Table)
	}
	if o.BudgetGrowth.Throttles == 0 {
		o.BudgetGrowth = DefaultBudgetGrowth
	}
	return &Ledger{
		db:         db,
		table:      o.Table,
		retry:      o.Retry,
		now:        o.Now,
		log:        o.Logger,
		maxBatch:   min(o.MaxBatch, DefaultMaxBatch), // no group holds more
		maxBuckets: o.MaxBuckets,
		maxHolds:   cmp.Or(o.MaxHolds, ledger.DefaultMaxHolds),
		maxPending: cmp.Or(o.MaxPending, ledger.DefaultMaxPending),
		linger:     o.Linger,
		queues:     queues{m: map[string]*userQueue{}},
		observe:    o.Observer,
		tokens:     o.PageTokens,
		accounts:   map[string]ledger.Account{},
		entropy:    ulid.Monotonic(o.Entropy, 0),
		growth:     o.BudgetGrowth,
		kinds:      kindCache{refresh: min(cmp.Or(o.KindRefresh, DefaultKindRefresh), MaxKindRefresh), max: o.MaxKinds},
	}
}

// newID returns a ULID for time t, increasing within the process.
func (l *Ledger) newID(t time.Time) string {
	// As ulid.MustNew(ulid.Timestamp(t), l.entropy).String(), in one
	// allocation, the string's, instead of three (issue 37).
	l.idMu.Lock()
	defer l.idMu.Unlock()
	ms := ulid.Timestamp(t)
	if err := l.id.SetTime(ms); err != nil {
		panic(err)
	}
	if err := l.entropy.MonotonicRead(ms, l.id[6:]); err != nil {
		panic(err)
	}
	var text [ulid.EncodedSize]byte
	_ = l.id.MarshalTextTo(text[:]) // the right size
	return string(text[:])
}

// queues holds, per user, the mutations waiting for their group. A user has
// a queue, and one goroutine committing from it (its first caller's, then a
// drainer's), exactly while mutations wait or commit; while a drainer's
// transaction is in flight, a goroutine of its takes the next group's calls
// (takeMore, see ahead.go), and they go back (putBack) if it is dropped.
type queues struct {
	mu sync.Mutex
	m  map[string]*userQueue
}

type userQueue struct {
	user    string
	pending []*call
}

// push queues c and reports whether its user was idle: then c's caller
// commits (see Ledger.lead).
func (q *queues) push(c *call) (uq *userQueue, lead bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	uq = q.m[c.m.UserID]
	lead = uq == nil
	if lead {
		uq = &userQueue{user: c.m.UserID}
		q.m[c.m.UserID] = uq
	}
	uq.pending = append(uq.pending, c)
	return uq, lead
}

// take returns carry and then queued calls, up to n in all. It retires the
// queue when there is nothing left, so the next push leads anew.
func (q *queues) take(uq *userQueue, carry []*call, n int) []*call {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.retire(uq, carry) {
		return nil
	}
	k := min(max(n-len(carry), 0), len(uq.pending))
	group := append(carry[:len(carry):len(carry)], uq.pending[:k]...)
	uq.pending = uq.pending[k:]
	return group
}

// takeMore returns up to n queued calls, for a group planned while the
// one before it commits (ahead.go); it never retires the queue: its
// committer is still at work.
func (q *queues) takeMore(uq *userQueue, n int) []*call {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := min(max(n, 0), len(uq.pending))
	more := uq.pending[:k:k]
	uq.pending = uq.pending[k:]
	return more
}

// waiting says whether calls are queued.
func (q *queues) waiting(uq *userQueue) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(uq.pending) > 0
}

// putBack puts calls taken by takeMore back at the head of the queue, in
// their order, ahead of those that queued since: their group was not sent.
func (q *queues) putBack(uq *userQueue, calls []*call) {
	if len(calls) == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	uq.pending = append(calls[:len(calls):len(calls)], uq.pending...)
}

// idle retires the queue if carry and the queue are empty, and reports
// whether it did; if not, the caller must commit what waits.
func (q *queues) idle(uq *userQueue, carry []*call) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.retire(uq, carry)
}

func (q *queues) retire(uq *userQueue, carry []*call) bool {
	if len(carry) > 0 || len(uq.pending) > 0 {
		return false
	}
	delete(q.m, uq.user)
	return true
}

// maxCachedAccounts bounds the aggregate cache; past it, it starts over.
const maxCachedAccounts = 100_000

// cachedAccount returns the user's aggregate, from the cache if it is
// there. Only the goroutine committing for the user uses its entry. A stale cache costs a
// failed account condition, never a wrong answer.
func (l *Ledger) cachedAccount(ctx context.Context, user string) (ledger.Account, error) {
	l.accountsMu.Lock()
	acct, cached := l.accounts[user]
	l.accountsMu.Unlock()
	if cached {
		return acct, nil
	}
	acct, err := l.account(ctx, user)
	if err == nil {
		l.cache(user, acct)
	}
	return acct, err
}

func (l *Ledger) cache(user string, acct ledger.Account) {
	l.accountsMu.Lock()
	defer l.accountsMu.Unlock()
	if len(l.accounts) >= maxCachedAccounts {
		l.accounts = map[string]ledger.Account{}
	}
	l.accounts[user] = acct
}

func (l *Ledger) forget(user string) {
	l.accountsMu.Lock()
	defer l.accountsMu.Unlock()
	delete(l.accounts, user)
}
