package sweep

import (
	"context"
	"hash/fnv"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/memory"
	"github.com/pointledger/pointledger/internal/ledgertest"
)

// The sweeper's rules over the memory store and memory leases; over the
// DynamoDB store's index and lease table in internal/ledger/dynamo
// (sweep_test.go), so that this package's tests link no AWS SDK.

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// indexed is a memory store with an index of next expiries as the
// DynamoDB store keeps one: each user in one of shards, due from its
// account's NextDue; stale names users of the store whom the index says
// are due whatever their account says (the consistent read decides).
type indexed struct {
	*memory.Store
	shards int
	stale  []string
}

func (s *indexed) DueUsers(ctx context.Context, shard int, t time.Time, fn func(string) error) error {
	for _, u := range s.UserIDs() {
		h := fnv.New32a()
		h.Write([]byte(u))
		if int(h.Sum32()%uint32(s.shards)) != shard { //nolint:gosec // a handful of shards
			continue
		}
		a, err := s.Balance(ctx, u)
		if err != nil {
			return err
		}
		next := a.NextDue()
		if !slices.Contains(s.stale, u) && (next.IsZero() || next.After(t)) {
			continue
		}
		if err := fn(u); err != nil {
			return err
		}
	}
	return nil
}

type fixture struct {
	clk    *ledgertest.Clock
	store  *indexed
	leases *memory.Leases
}

func newFixture() *fixture {
	clk := ledgertest.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	return &fixture{clk: clk, store: &indexed{Store: memory.New(clk.Now), shards: 16}, leases: memory.NewLeases(clk.Now)}
}

func (f *fixture) apply(tb testing.TB, typ ledger.EntryType, r ledger.Request) {
	tb.Helper()
	m, err := ledger.NewMutation(typ, r, ledger.DefaultScale)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := f.store.Apply(context.Background(), m); err != nil {
		tb.Fatal(err)
	}
}

func (f *fixture) sweeper(owner string) *Sweeper {
	return New(f.store, f.leases, Options{Owner: owner, Now: f.clk.Now, Log: quiet})
}

func (f *fixture) entries(tb testing.TB, user string) []ledger.Entry {
	tb.Helper()
	es, err := f.store.EntriesAfter(context.Background(), user, 0, 1000)
	if err != nil {
		tb.Fatal(err)
	}
	return es
}

// A pass expires what is due and nothing else; a user the index names
// without anything due gets nothing written; a second pass finds nothing.
func TestAPassExpiresDuePointsOnly(t *testing.T) {
	t.Parallel()
	f := newFixture()
	ctx := context.Background()
	t0 := f.clk.Now()
	f.apply(t, ledger.EntryGrant, ledger.Request{UserID: "due", RequestID: "g1", Amount: "5", Expire: t0.Add(time.Hour)})
	f.apply(t, ledger.EntryGrant, ledger.Request{UserID: "due", RequestID: "g2", Amount: "3", Expire: t0.Add(5 * time.Hour)})
	f.apply(t, ledger.EntryGrant, ledger.Request{UserID: "later", RequestID: "g", Amount: "4", Expire: t0.Add(3 * time.Hour)})
	f.apply(t, ledger.EntryGrant, ledger.Request{UserID: "never", RequestID: "g", Amount: "9"})
	f.apply(t, ledger.EntryGrant, ledger.Request{UserID: "stale", RequestID: "g", Amount: "2", Expire: t0.Add(4 * time.Hour)})
	f.store.stale = []string{"stale"}

	f.clk.Add(2 * time.Hour)
	p, err := f.sweeper("a").Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.Expired != 1 || !p.Points.Equal(decimal.NewFromInt(5)) || p.Shards != 16 || p.Users != 2 {
		t.Fatalf("pass = %+v, want 2 users checked (due and stale), one user's 5 points expired, over 16 shards", p)
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
	if p, err = f.sweeper("a").Pass(ctx); err != nil || p.Expired != 0 {
		t.Errorf("a second pass: %+v, %v; want nothing expired", p, err)
	}
}

// Holds and pending grants are due too: a pass releases an expired hold
// and matures a pending grant at its effective time, not before.
func TestAPassReleasesHoldsAndMaturesGrants(t *testing.T) {
	t.Parallel()
	f := newFixture()
	ctx := context.Background()
	at := f.clk.Now().Add(time.Hour)
	f.apply(t, ledger.EntryGrant, ledger.Request{UserID: "holder", RequestID: "g", Amount: "10"})
	f.apply(t, ledger.EntryHold, ledger.Request{UserID: "holder", RequestID: "h", Amount: "4", Expire: at})
	f.apply(t, ledger.EntryGrant, ledger.Request{UserID: "pending", RequestID: "g", Amount: "7", Effective: at})
	f.clk.Add(time.Hour - time.Microsecond)
	if p, err := f.sweeper("a").Pass(ctx); err != nil || p.Expired != 0 {
		t.Fatalf("a pass before the hold's expiry and the grant's effective time: %+v, %v; want nothing written", p, err)
	}
	f.clk.Add(time.Microsecond)
	p, err := f.sweeper("a").Pass(ctx)
	if err != nil || p.Expired != 2 || !p.Points.IsZero() {
		t.Fatalf("a pass at that time: %+v, %v; want a hold released and a grant matured, no points expired", p, err)
	}
	if es := f.entries(t, "holder"); len(es) != 3 || es[2].Type != ledger.EntryRelease || es[2].Reason != ledger.ReleaseExpired {
		t.Errorf("holder's entries = %+v, want the grant, the hold and its RELEASE", es)
	}
	if es := f.entries(t, "pending"); len(es) != 2 || es[1].Type != ledger.EntryMaturation || !es[1].Amount.Equal(decimal.NewFromInt(7)) {
		t.Errorf("pending's entries = %+v, want the grant and its MATURATION", es)
	}
}

// Two sweepers share the shards: a shard one holds, the other skips, and
// takes once it is let go.
func TestSweepersShareShardsByLease(t *testing.T) {
	t.Parallel()
	f := newFixture()
	ctx := context.Background()
	unlock, err := f.leases.Lock(ctx, LeaseKey(3), "b", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.sweeper("a").Pass(ctx)
	if err != nil || p.Shards != 15 {
		t.Fatalf("a pass while b holds shard 3: %+v, %v; want 15 shards swept", p, err)
	}
	if err := unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if p, err = f.sweeper("a").Pass(ctx); err != nil || p.Shards != 16 {
		t.Fatalf("a pass after b let go: %+v, %v; want 16 shards", p, err)
	}
	// A lease left by a sweeper that stopped is taken once it expires.
	if _, err := f.leases.Lock(ctx, LeaseKey(5), "gone", time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	f.clk.Add(time.Minute)
	if p, err = f.sweeper("a").Pass(ctx); err != nil || p.Shards != 16 {
		t.Fatalf("a pass after b's lease expired: %+v, %v; want 16 shards", p, err)
	}
}
