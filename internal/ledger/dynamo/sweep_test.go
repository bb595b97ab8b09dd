// The sweeper (package sweep) over the DynamoDB store's index of next
// expiries and the DynamoDB lease table: what the index nominates, and
// that it is found without a scan. The sweeper's own rules are tested
// over the memory store in package sweep, which links no AWS SDK.
package dynamo_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/ledgertest"
	"github.com/pointledger/pointledger/internal/projection"
	"github.com/pointledger/pointledger/internal/sweep"
)

var quietSweeper = slog.New(slog.NewTextHandler(io.Discard, nil))

// noScans fails the test on any Scan: the sweeper finds due users through
// the index only.
type noScans struct {
	dynamo.API
	scans atomic.Int64
}

func (n *noScans) Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	n.scans.Add(1)
	return n.API.Scan(ctx, in, opts...)
}

type sweepFixture struct {
	env    *dynamotest.Env
	clk    *ledgertest.Clock
	store  *dynamo.Ledger
	db     *noScans
	leases *projection.LeaseTable
}

func newSweepFixture(tb testing.TB) *sweepFixture {
	tb.Helper()
	env := dynamotest.New(tb)
	clk := ledgertest.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	db := &noScans{API: env.Client}
	return &sweepFixture{env: env, clk: clk, db: db,
		store:  dynamo.New(db, dynamo.Options{Table: env.Ledger, Now: clk.Now, Logger: quietSweeper}),
		leases: projection.NewLeaseTable(env.Client, env.Leases, clk.Now)}
}

func (f *sweepFixture) grant(tb testing.TB, user, id, amount string, expire time.Time) {
	tb.Helper()
	m, err := ledger.NewMutation(ledger.EntryGrant, ledger.Request{UserID: user, RequestID: id, Amount: amount, Expire: expire}, ledger.DefaultScale)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := f.store.Apply(context.Background(), m); err != nil {
		tb.Fatal(err)
	}
}

func (f *sweepFixture) sweeper(owner string) *sweep.Sweeper {
	return sweep.New(f.store, f.leases, sweep.Options{Owner: owner, Now: f.clk.Now, Log: quietSweeper})
}

func (f *sweepFixture) entries(tb testing.TB, user string) []ledger.Entry {
	tb.Helper()
	es, err := f.store.EntriesAfter(context.Background(), user, 0, 1000)
	if err != nil {
		tb.Fatal(err)
	}
	return es
}

func TestTheSweeperExpiresIdleUsersDuePointsOnly(t *testing.T) {
	t.Parallel()
	f := newSweepFixture(t)
	ctx := context.Background()
	t0 := f.clk.Now()
	f.grant(t, "due", "g1", "5", t0.Add(time.Hour))
	f.grant(t, "due", "g2", "3", t0.Add(5*time.Hour))
	f.grant(t, "later", "g", "4", t0.Add(3*time.Hour))
	f.grant(t, "never", "g", "9", time.Time{})
	// Index entries that say more than the account (one in every shard):
	// the consistent read decides, and nothing is written.
	f.grant(t, "stale", "g", "2", t0.Add(4*time.Hour))
	for shard := range dynamo.ExpiryShards {
		_, err := f.env.Client.PutItem(ctx, &dynamodb.PutItemInput{TableName: &f.env.Ledger, Item: map[string]types.AttributeValue{
			"PK": &types.AttributeValueMemberS{Value: fmt.Sprintf("EXPIRY#X#%02d", shard)},
			"SK": &types.AttributeValueMemberS{Value: "2026-11-22T10:30:00.000000Z#stale"},
		}})
		if err != nil {
			t.Fatal(err)
		}
	}

	f.clk.Add(2 * time.Hour)
	p, err := f.sweeper("a").Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.Expired != 1 || !p.Points.Equal(decimal.NewFromInt(5)) || p.Shards != 16 {
		t.Fatalf("pass = %+v, want one user's 5 points expired over 16 shards", p)
	}
	due := f.entries(t, "due")
	if len(due) != 3 || due[2].Type != ledger.EntryExpiration || !due[2].Amount.Equal(decimal.NewFromInt(-5)) {
		t.Errorf("due's entries = %+v, want its 2 grants and an EXPIRATION of 5", due)
	}
	for _, u := range []string{"later", "never", "stale"} {
		if es := f.entries(t, u); len(es) != 1 {
			t.Errorf("%s: %d entries, want its grant only", u, len(es))
		}
	}
	// Again: nothing is due any more, nothing is written.
	if p, err = f.sweeper("a").Pass(ctx); err != nil || p.Expired != 0 {
		t.Errorf("a second pass: %+v, %v; want nothing expired", p, err)
	}
	if n := f.db.scans.Load(); n != 0 {
		t.Errorf("the sweeper scanned the table %d times", n)
	}
	for _, u := range []string{"due", "later", "never", "stale"} {
		a, err := f.store.Audit(ctx, u)
		if err != nil || len(a.Findings) > 0 {
			t.Errorf("audit of %s: %v, %v", u, a.Findings, err)
		}
	}
}

// An idle user whose only expiring thing is a hold (its points never
// expire) is in the index by the hold's expiry, and the pass after it
// releases the hold; the user leaves the index.
func TestTheSweeperReleasesAnIdleUsersExpiredHold(t *testing.T) {
	t.Parallel()
	f := newSweepFixture(t)
	ctx := context.Background()
	expire := f.clk.Now().Add(time.Hour)
	f.grant(t, "idle", "g", "10", time.Time{})
	m, err := ledger.NewMutation(ledger.EntryHold, ledger.Request{UserID: "idle", RequestID: "h", Amount: "4", Expire: expire}, ledger.DefaultScale)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Apply(ctx, m); err != nil {
		t.Fatal(err)
	}
	due := func(at time.Time) []string {
		var users []string
		for shard := range dynamo.ExpiryShards {
			if err := f.store.DueUsers(ctx, shard, at, func(u string) error { users = append(users, u); return nil }); err != nil {
				t.Fatal(err)
			}
		}
		return users
	}
	if got := due(expire); len(got) != 1 || got[0] != "idle" {
		t.Fatalf("users due at the hold's expiry: %v, want idle", got)
	}
	f.clk.Add(time.Hour - time.Microsecond)
	if p, err := f.sweeper("a").Pass(ctx); err != nil || p.Expired != 0 {
		t.Fatalf("a pass before the expiry: %+v, %v; want nothing released", p, err)
	}
	f.clk.Add(time.Microsecond)
	p, err := f.sweeper("a").Pass(ctx)
	if err != nil || p.Expired != 1 || !p.Points.IsZero() {
		t.Fatalf("a pass at the expiry: %+v, %v; want one user's hold released, no points expired", p, err)
	}
	es := f.entries(t, "idle")
	if last := es[len(es)-1]; len(es) != 3 || last.Type != ledger.EntryRelease || last.Reason != ledger.ReleaseExpired || last.HoldRequestID != "h" {
		t.Errorf("idle's entries = %+v, want the grant, the hold and its RELEASE", es)
	}
	if got := due(expire.Add(24 * time.Hour)); len(got) != 0 {
		t.Errorf("users due after the release: %v, want none", got)
	}
	if a, err := f.store.Audit(ctx, "idle"); err != nil || len(a.Findings) > 0 || !a.Account.Balance.Equal(decimal.NewFromInt(10)) || !a.Account.Held.IsZero() {
		t.Errorf("audit: %+v, %v", a, err)
	}
}

// An idle user's pending grant is due at its effective time: the index
// names the user from then, and a pass writes its MATURATION.
func TestTheSweeperMaturesAnIdleUsersPendingGrant(t *testing.T) {
	t.Parallel()
	f := newSweepFixture(t)
	ctx := context.Background()
	eff := f.clk.Now().Add(time.Hour)
	m, err := ledger.NewMutation(ledger.EntryGrant, ledger.Request{UserID: "idle", RequestID: "g", Amount: "7", Effective: eff}, ledger.DefaultScale)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Apply(ctx, m); err != nil {
		t.Fatal(err)
	}
	f.clk.Add(time.Hour - time.Microsecond)
	if p, err := f.sweeper("a").Pass(ctx); err != nil || p.Expired != 0 {
		t.Fatalf("a pass before the effective time: %+v, %v; want nothing written", p, err)
	}
	f.clk.Add(time.Microsecond)
	p, err := f.sweeper("a").Pass(ctx)
	if err != nil || p.Expired != 1 || !p.Points.IsZero() {
		t.Fatalf("a pass at the effective time: %+v, %v; want one user's grant matured, no points expired", p, err)
	}
	es := f.entries(t, "idle")
	if last := es[len(es)-1]; len(es) != 2 || last.Type != ledger.EntryMaturation || !last.Amount.Equal(decimal.NewFromInt(7)) || last.GrantRequestID != "g" {
		t.Errorf("idle's entries = %+v, want the grant and its MATURATION", es)
	}
	if a, err := f.store.Audit(ctx, "idle"); err != nil || len(a.Findings) > 0 || !a.Account.Balance.Equal(decimal.NewFromInt(7)) || !a.Account.Pending.IsZero() {
		t.Errorf("audit: %+v, %v", a, err)
	}
	if p, err := f.sweeper("a").Pass(ctx); err != nil || p.Users != 0 {
		t.Errorf("a pass after: %+v, %v; want no user due", p, err)
	}
}

// Two sweepers share the shards: a shard one holds, the other skips.
func TestSweepersShareShardsByLease(t *testing.T) {
	t.Parallel()
	f := newSweepFixture(t)
	ctx := context.Background()
	held, err := f.leases.Acquire(ctx, sweep.LeaseKey(3), "b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.sweeper("a").Pass(ctx)
	if err != nil || p.Shards != 15 {
		t.Fatalf("a pass while b holds shard 3: %+v, %v; want 15 shards swept", p, err)
	}
	if err := f.leases.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	if p, err = f.sweeper("a").Pass(ctx); err != nil || p.Shards != 16 {
		t.Fatalf("a pass after b let go: %+v, %v; want 16 shards", p, err)
	}
}

// BenchmarkSweep measures a pass over users whose points are all due: the
// users a second one sweeper puts on the record, each a consistent read and
// a transaction.
//
//	go test -run '^$' -bench Sweep -benchtime 200x ./internal/ledger/dynamo/
func BenchmarkSweep(b *testing.B) {
	f := newSweepFixture(b)
	t0 := f.clk.Now()
	for i := range b.N {
		f.grant(b, fmt.Sprintf("user-%d", i), "g", "10", t0.Add(time.Hour))
	}
	f.clk.Add(2 * time.Hour)
	b.ResetTimer()
	p, err := f.sweeper("bench").Pass(context.Background())
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if p.Expired != int64(b.N) {
		b.Fatalf("expired %d users of %d", p.Expired, b.N)
	}
	b.ReportMetric(p.Rate(), "users/s")
}
