// Package dynamo stores the ledger in one DynamoDB table (single-table
// design; see migrations/) and implements its write path (write.go) and
// consistent reads (read.go). The invariants it keeps are those of package
// ledger.
package dynamo

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/oklog/ulid/v2"
)

// API is the part of the DynamoDB client the ledger uses. *dynamodb.Client
// implements it; tests wrap it to inject faults DynamoDB Local cannot produce.
type API interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Options configure a Ledger. Only Table is required.
type Options struct {
	Table   string           // the ledger table's full name
	Retry   Retry            // zero: DefaultRetry
	Now     func() time.Time // zero: time.Now
	Entropy io.Reader        // randomness of entry ids; zero: crypto/rand
	Logger  *slog.Logger     // zero: slog.Default()
}

// Ledger reads and writes users' ledgers in one DynamoDB table.
type Ledger struct {
	db    API
	table string
	retry Retry
	now   func() time.Time
	log   *slog.Logger
	locks userLocks

	idMu    sync.Mutex
	entropy *ulid.MonotonicEntropy
}

// New returns a Ledger on db.
func New(db API, o Options) *Ledger {
	if o.Retry.MaxAttempts < 1 {
		o.Retry = DefaultRetry
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
	return &Ledger{
		db:      db,
		table:   o.Table,
		retry:   o.Retry,
		now:     o.Now,
		log:     o.Logger,
		locks:   userLocks{m: map[string]*userLock{}},
		entropy: ulid.Monotonic(o.Entropy, 0),
	}
}

// newID returns a ULID for time t, increasing within the process.
func (l *Ledger) newID(t time.Time) string {
	l.idMu.Lock()
	defer l.idMu.Unlock()
	return ulid.MustNew(ulid.Timestamp(t), l.entropy).String()
}

// userLocks serialises the mutations of each user in this process, so that
// a hot user's requests wait in line instead of failing each other's version
// conditions. Waiting honours the caller's context.
type userLocks struct {
	mu sync.Mutex
	m  map[string]*userLock
}

type userLock struct {
	ch   chan struct{} // holds one token while the user is locked
	refs int           // holders and waiters; the entry is dropped at zero
}

func (u *userLocks) lock(ctx context.Context, user string) (unlock func(), err error) {
	u.mu.Lock()
	l := u.m[user]
	if l == nil {
		l = &userLock{ch: make(chan struct{}, 1)}
		u.m[user] = l
	}
	l.refs++
	u.mu.Unlock()

	release := func() {
		u.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(u.m, user)
		}
		u.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}
