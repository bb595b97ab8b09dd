package dynamo_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/notice"
)

// A bucket that expires before the next pass could see it is noticed as
// soon as its grant reaches the Follower (issue 31: a 90 s ttl expired
// with no notice, passes coming every 5 minutes), once; one further off
// is left to the passes; and the Observer counts each notice decided.
func TestAShortLivedGrantIsNoticedAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := f.clk.Now()
	f.grant(t, "quick", "g", "9", now.Add(90*time.Second))
	f.grant(t, "slow", "g", "5", now.Add(time.Hour))
	var mu sync.Mutex
	decided := map[ledger.EventType]int{}
	fd, err := notice.New(f.store, f.notices, f.leases, notice.Options{Owner: "a", Now: f.clk.Now, Log: quiet, Interval: 5 * time.Minute,
		Observer: notice.Observer{Decided: func(t ledger.EventType) { mu.Lock(); decided[t]++; mu.Unlock() }}})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	fl := fd.Follow(rec.emit)
	var entries []ledger.Entry
	for _, u := range []string{"quick", "slow"} {
		es, err := f.store.EntriesAfter(context.Background(), u, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, es...)
	}
	for range 2 { // a batch applied again decides nothing more
		if err := fl.Apply(context.Background(), entries); err != nil {
			t.Fatal(err)
		}
	}
	got := rec.taken()
	if len(got) != 1 || got[0].UserID != "quick" || got[0].Type != ledger.EventPointsExpiring {
		t.Fatalf("emitted %+v, want quick's notice alone (slow's bucket is the next pass's)", got)
	}
	if want := wantData(got[0].ID, "quick", 1, now.Add(90*time.Second), "9", "9"); string(got[0].Data) != want {
		t.Errorf("data %s, want %s", got[0].Data, want)
	}
	// The pass decides slow's, and nothing more of quick's.
	if p := f.pass(t, fd, rec.emit); p.Decided != 1 {
		t.Errorf("the pass decided %d, want slow's notice", p.Decided)
	}
	mu.Lock()
	defer mu.Unlock()
	if decided[ledger.EventPointsExpiring] != 2 || len(decided) != 1 {
		t.Errorf("observed %v, want 2 points.expiring decided", decided)
	}
}
