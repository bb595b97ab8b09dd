package dynamo_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/ledgertest"
	"github.com/pointledger/pointledger/internal/notice"
	noticedynamo "github.com/pointledger/pointledger/internal/notice/dynamo"
	"github.com/pointledger/pointledger/internal/projection"
	"github.com/pointledger/pointledger/internal/webhook"
)

func TestMain(m *testing.M) { dynamotest.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

const day = 24 * time.Hour

// noScans counts Scans of the ledger table: candidates come from the
// index of next expiries only. (The notices' Table has no Scan at all.)
type noScans struct {
	dynamo.API
	scans atomic.Int64
}

func (n *noScans) Scan(ctx context.Context, in *dynamodb.ScanInput, opts ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	n.scans.Add(1)
	return n.API.Scan(ctx, in, opts...)
}

type fixture struct {
	env     *dynamotest.Env
	clk     *ledgertest.Clock
	db      *noScans
	store   *dynamo.Ledger
	notices *noticedynamo.Table
	leases  *projection.LeaseTable
}

func newFixture(tb testing.TB) *fixture {
	tb.Helper()
	env := dynamotest.New(tb)
	clk := ledgertest.NewClock(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
	db := &noScans{API: env.Client}
	f := &fixture{env: env, clk: clk, db: db,
		store:   dynamo.New(db, dynamo.Options{Table: env.Ledger, Now: clk.Now, Logger: quiet}),
		notices: noticedynamo.NewTable(env.Client, env.Webhooks),
		leases:  projection.NewLeaseTable(env.Client, env.Leases, clk.Now)}
	tb.Cleanup(func() {
		if n := db.scans.Load(); n > 0 {
			tb.Errorf("%d scans of the ledger table, want none", n)
		}
	})
	return f
}

func (f *fixture) apply(tb testing.TB, t ledger.EntryType, r ledger.Request) {
	tb.Helper()
	m, err := ledger.NewMutation(t, r, ledger.DefaultScale)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := f.store.Apply(context.Background(), m); err != nil {
		tb.Fatal(err)
	}
}

func (f *fixture) grant(tb testing.TB, user, id, amount string, expire time.Time) {
	tb.Helper()
	f.apply(tb, ledger.EntryGrant, ledger.Request{UserID: user, RequestID: id, Amount: amount, Expire: expire})
}

func (f *fixture) finder(tb testing.TB, owner string, leads ...time.Duration) *notice.Finder {
	tb.Helper()
	return f.finderOn(tb, f.leases, owner, leads...)
}

func (f *fixture) finderOn(tb testing.TB, leases *projection.LeaseTable, owner string, leads ...time.Duration) *notice.Finder {
	tb.Helper()
	fd, err := notice.New(f.store, f.notices, leases, notice.Options{Leads: leads, Owner: owner, Now: f.clk.Now, Log: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	return fd
}

func (f *fixture) pass(tb testing.TB, fd *notice.Finder, emit notice.Emit) notice.Progress {
	tb.Helper()
	p, err := fd.Pass(context.Background(), emit)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// noticesOf reads what the webhooks table holds of user's notices of
// buckets still to expire.
func (f *fixture) noticesOf(tb testing.TB, user string) []notice.Notice {
	tb.Helper()
	ns, err := f.notices.Of(context.Background(), user, f.clk.Now())
	if err != nil {
		tb.Fatal(err)
	}
	return ns
}

// recorder is an Emit that keeps what it was given, failing when fail
// says so: the dispatcher's side, without the dispatcher.
type recorder struct {
	mu     sync.Mutex
	events []webhook.Event
	fail   func(ev webhook.Event) error
}

func (r *recorder) emit(_ context.Context, ev webhook.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		if err := r.fail(ev); err != nil {
			return err
		}
	}
	r.events = append(r.events, ev)
	return nil
}

func (r *recorder) taken() []webhook.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]webhook.Event(nil), r.events...)
}

// wantData is the data a notice of user's bucket expiring at expire must
// carry.
func wantData(id, user string, version int64, expire time.Time, amount, balance string) string {
	return fmt.Sprintf(`{"event_id":%q,"user_id":%q,"version":"%d","expire_time":%q,"amount":%q,"balance":%q,"kind":"standard"}`,
		id, user, version, webhook.FormatTimestamp(expire), amount, balance)
}

// noticeKey names the notice an event is of: its user and bucket.
func noticeKey(tb testing.TB, ev webhook.Event) string {
	tb.Helper()
	var d struct {
		UserID     string `json:"user_id"`
		ExpireTime string `json:"expire_time"`
	}
	if err := json.Unmarshal(ev.Data, &d); err != nil {
		tb.Fatalf("data of %s: %v", ev.ID, err)
	}
	return d.UserID + " " + d.ExpireTime
}

func TestABucketGetsOneNoticePerLeadOverManyPasses(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	t0 := f.clk.Now()
	expire := t0.Add(10 * day)
	f.grant(t, "alice", "g1", "50", expire)
	f.grant(t, "alice", "g2", "7", time.Time{}) // never expires: in the balance, never noticed
	fd := f.finder(t, "a", 7*day, day)
	rec := &recorder{}

	if p := f.pass(t, fd, rec.emit); p.Decided != 0 || p.Shards != 16 {
		t.Fatalf("10 days before: %+v, want nothing decided over 16 shards", p)
	}
	f.clk.Add(3 * day) // exactly 7 days before: due
	for range 3 {
		f.pass(t, fd, rec.emit)
	}
	f.clk.Add(5 * day) // 2 days before: nothing more
	f.pass(t, fd, rec.emit)
	f.clk.Add(day + time.Hour) // 23 h before: the one-day notice
	for range 3 {
		f.pass(t, fd, rec.emit)
	}

	got := rec.taken()
	if len(got) != 2 {
		t.Fatalf("%d notices emitted, want 2 (7 days and 1 day before): %+v", len(got), got)
	}
	if got[0].ID == got[1].ID {
		t.Errorf("both notices have id %s, want one id each", got[0].ID)
	}
	for i, at := range []time.Time{t0.Add(3 * day), t0.Add(9*day + time.Hour)} {
		ev := got[i]
		if ev.Type != ledger.EventPointsExpiring || ev.UserID != "alice" || ev.Version != 2 || !ev.Time.Equal(at) {
			t.Errorf("notice %d = %+v, want points.expiring of alice at version 2, decided at %s", i, ev, at)
		}
		if want := wantData(ev.ID, "alice", 2, expire, "50", "57"); string(ev.Data) != want {
			t.Errorf("notice %d's data = %s, want %s", i, ev.Data, want)
		}
	}
	ns := f.noticesOf(t, "alice")
	if len(ns) != 2 || ns[0].Lead+ns[1].Lead != 8*day || !ns[0].Emitted || !ns[1].Emitted {
		t.Errorf("notices kept = %+v, want the 1-day and 7-day ones, both emitted", ns)
	}
}

func TestOnlyTheNearestLeadIsDecidedWhenSeveralAreDue(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.grant(t, "late", "g", "4", f.clk.Now().Add(12*time.Hour))
	fd := f.finder(t, "a", 7*day, day)
	rec := &recorder{}
	for range 3 {
		f.pass(t, fd, rec.emit)
	}
	ns := f.noticesOf(t, "late")
	if got := rec.taken(); len(got) != 1 || len(ns) != 1 || ns[0].Lead != day {
		t.Errorf("emitted %+v, kept %+v; want the 1-day notice alone", got, ns)
	}
}

func TestNoNoticeForASpentOrExpiredBucket(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	t0 := f.clk.Now()
	// Spent: its bucket is gone from the account; a hold of points that
	// never expire keeps the user in the index, so the account is read.
	f.grant(t, "spent", "g1", "10", t0.Add(3*day))
	f.grant(t, "spent", "g2", "5", time.Time{})
	f.apply(t, ledger.EntryPurchase, ledger.Request{UserID: "spent", RequestID: "p", Amount: "10"})
	f.apply(t, ledger.EntryHold, ledger.Request{UserID: "spent", RequestID: "h", Amount: "1", Expire: t0.Add(day)})
	// Held to nothing is spent too, for as long as the hold lasts.
	f.grant(t, "held", "g", "10", t0.Add(3*day))
	f.apply(t, ledger.EntryHold, ledger.Request{UserID: "held", RequestID: "h", Amount: "10", Expire: t0.Add(2 * day)})
	// Expired an hour ago, and no EXPIRATION written yet (no sweeper ran):
	// time decides, and the index still names the user.
	f.grant(t, "expired", "g", "10", t0.Add(time.Hour))
	f.clk.Add(2 * time.Hour)

	rec := &recorder{}
	p := f.pass(t, f.finder(t, "a"), rec.emit)
	if got := rec.taken(); len(got) != 0 {
		t.Errorf("emitted %+v, want nothing", got)
	}
	if p.Candidates != 3 || p.Decided != 0 {
		t.Errorf("pass = %+v, want 3 candidates (the index names them all) and nothing decided", p)
	}
	for _, u := range []string{"spent", "held", "expired"} {
		if ns := f.noticesOf(t, u); len(ns) != 0 {
			t.Errorf("%s: notices kept %+v, want none", u, ns)
		}
	}
}

func TestTheAmountIsWhatRemainsWhenDecided(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	expire := f.clk.Now().Add(5 * day)
	f.grant(t, "bob", "g", "100", expire)
	f.apply(t, ledger.EntryPurchase, ledger.Request{UserID: "bob", RequestID: "p", Amount: "30.25"})
	rec := &recorder{}
	f.pass(t, f.finder(t, "a"), rec.emit)
	// Spent after the decision: the notice said what was there then.
	f.apply(t, ledger.EntryPurchase, ledger.Request{UserID: "bob", RequestID: "p2", Amount: "10"})
	f.pass(t, f.finder(t, "a"), rec.emit)

	got := rec.taken()
	if len(got) != 1 {
		t.Fatalf("emitted %+v, want one notice", got)
	}
	if want := wantData(got[0].ID, "bob", 2, expire, "69.75", "69.75"); string(got[0].Data) != want {
		t.Errorf("data = %s, want %s", got[0].Data, want)
	}
}

// The index holds a user's next expiry only. A bucket behind the next one
// but within the lead is noticed too, and so is one granted later, when
// the index does not change (the next expiry stays what it was).
func TestEveryBucketWithinTheLeadIsNoticedNotOnlyTheNext(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	t0 := f.clk.Now()
	f.grant(t, "carol", "g1", "5", t0.Add(day))
	f.grant(t, "carol", "g2", "6", t0.Add(5*day))
	fd := f.finder(t, "a")
	rec := &recorder{}
	f.pass(t, fd, rec.emit)
	f.grant(t, "carol", "g3", "8", t0.Add(6*day))
	f.clk.Add(time.Hour)
	f.pass(t, fd, rec.emit)

	got := rec.taken()
	if len(got) != 3 {
		t.Fatalf("emitted %d notices, want 3 (one per bucket): %+v", len(got), got)
	}
	for i, want := range []struct {
		version int64
		expire  time.Time
		amount  string
		balance string
	}{{2, t0.Add(day), "5", "11"}, {2, t0.Add(5 * day), "6", "11"}, {3, t0.Add(6 * day), "8", "19"}} {
		if w := wantData(got[i].ID, "carol", want.version, want.expire, want.amount, want.balance); string(got[i].Data) != w {
			t.Errorf("notice %d: %s, want %s", i, got[i].Data, w)
		}
	}
}

func TestAFailedEmitIsRetriedWithTheSameEvent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.grant(t, "dave", "g", "12", f.clk.Now().Add(2*day))
	fd := f.finder(t, "a")
	var failures atomic.Int64
	var refused []webhook.Event
	rec := &recorder{fail: func(ev webhook.Event) error {
		if failures.Add(1) == 1 {
			refused = append(refused, ev)
			return errors.New("webhooks table unavailable")
		}
		return nil
	}}

	p, err := fd.Pass(context.Background(), rec.emit)
	if err == nil || p.EmitsFailed != 1 || p.Decided != 1 {
		t.Fatalf("pass with Emit failing = %+v, %v; want one decided, its Emit failed, and an error", p, err)
	}
	if ns := f.noticesOf(t, "dave"); len(ns) != 1 || ns[0].Emitted || ns[0].Event.ID != refused[0].ID {
		t.Fatalf("notices kept = %+v, want the one refused, not emitted", ns)
	}
	f.clk.Add(time.Minute)
	p = f.pass(t, fd, rec.emit)
	if p.Retried != 1 || p.Emitted != 1 || p.Decided != 0 {
		t.Errorf("second pass = %+v, want the notice emitted again, nothing new decided", p)
	}
	f.pass(t, fd, rec.emit)

	got := rec.taken()
	if len(got) != 1 {
		t.Fatalf("emitted %+v, want the one notice, once", got)
	}
	if got[0].ID != refused[0].ID || string(got[0].Data) != string(refused[0].Data) || !got[0].Time.Equal(refused[0].Time) {
		t.Errorf("emitted again %+v, want the refused event %+v", got[0], refused[0])
	}
	if ns := f.noticesOf(t, "dave"); len(ns) != 1 || !ns[0].Emitted {
		t.Errorf("notices kept = %+v, want it emitted", ns)
	}
}

func TestANoticeNotEmittedIsDroppedOnceItsBucketIsSpent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	t0 := f.clk.Now()
	f.grant(t, "erin", "g1", "3", t0.Add(2*day))
	f.grant(t, "erin", "g2", "4", t0.Add(4*day)) // keeps erin a candidate
	fd := f.finder(t, "a")
	down := &recorder{fail: func(webhook.Event) error { return errors.New("down") }}
	if _, err := fd.Pass(context.Background(), down.emit); err == nil {
		t.Fatal("a pass whose Emits all failed returned no error")
	}
	f.apply(t, ledger.EntryPurchase, ledger.Request{UserID: "erin", RequestID: "p", Amount: "3"})
	up := &recorder{}
	f.pass(t, fd, up.emit)
	got := up.taken()
	if len(got) != 1 || got[0].ID != f.noticesOf(t, "erin")[1].Event.ID {
		t.Errorf("emitted %+v, want only the notice of the bucket still holding points", got)
	}
}

// Finders racing: those sharing the lease table take turns by shard; two
// more with lease tables of their own (as when a lease expires mid-pass)
// look at the same users at the same time. The conditional write keeps
// every notice decided once.
func TestConcurrentFindersDecideEachNoticeOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	t0 := f.clk.Now()
	const users = 24
	for i := range users {
		user := fmt.Sprintf("u%02d", i)
		f.grant(t, user, "g1", "10", t0.Add(2*day))
		f.grant(t, user, "g2", "20", t0.Add(3*day))
	}
	other1 := projection.NewLeaseTable(f.env.Client, dynamotest.New(t).Leases, f.clk.Now)
	other2 := projection.NewLeaseTable(f.env.Client, dynamotest.New(t).Leases, f.clk.Now)
	finders := []*notice.Finder{
		f.finder(t, "a"), f.finder(t, "b"), f.finder(t, "c"),
		f.finderOn(t, other1, "d"), f.finderOn(t, other2, "e"),
	}
	rec := &recorder{}
	for range 2 {
		var wg sync.WaitGroup
		for _, fd := range finders {
			wg.Go(func() {
				if _, err := fd.Pass(context.Background(), rec.emit); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}

	byNotice := map[string]map[string]webhook.Event{} // user and expire_time -> event id -> event
	for _, ev := range rec.taken() {
		key := noticeKey(t, ev)
		if byNotice[key] == nil {
			byNotice[key] = map[string]webhook.Event{}
		}
		if first, ok := byNotice[key][ev.ID]; ok && string(first.Data) != string(ev.Data) {
			t.Errorf("event %s emitted with two bodies: %s and %s", ev.ID, first.Data, ev.Data)
		}
		byNotice[key][ev.ID] = ev
	}
	if len(byNotice) != 2*users {
		t.Errorf("%d notices emitted, want %d (2 buckets of %d users)", len(byNotice), 2*users, users)
	}
	for key, ids := range byNotice {
		if len(ids) != 1 {
			t.Errorf("%s: emitted under %d ids, want one", key, len(ids))
		}
	}
	for i := range users {
		user := fmt.Sprintf("u%02d", i)
		ns := f.noticesOf(t, user)
		if len(ns) != 2 || !ns[0].Emitted || !ns[1].Emitted {
			t.Errorf("%s: notices kept %+v, want 2, emitted", user, ns)
			continue
		}
		for _, n := range ns {
			if _, ok := byNotice[noticeKey(t, n.Event)][n.Event.ID]; !ok {
				t.Errorf("%s: notice kept %s was never emitted", user, n.Event.ID)
			}
		}
	}
}
