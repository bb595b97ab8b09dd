package allowance_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/allowance"
	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/dynamotest"
)

func TestMain(m *testing.M) { dynamotest.MainWithoutStreams(m) }

// contract: what every auth.Allowances keeps. newInstance returns another
// instance over the same allowances (another ledgerd, or one restarted).
func contract(t *testing.T, newInstance func() auth.Allowances) {
	ctx := context.Background()
	d := decimal.RequireFromString
	limit := d("100")
	// 30 takes of 7.5 at once, from three instances: exactly 13 fit in
	// 100 (97.5).
	instances := []auth.Allowances{newInstance(), newInstance(), newInstance()}
	var taken atomic.Int64
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := instances[i%3].Take(ctx, "ops-1", "2026-11-28", d("7.5"), limit)
			if err != nil {
				t.Error(err)
			}
			if ok {
				taken.Add(1)
			}
		}()
	}
	wg.Wait()
	if taken.Load() != 13 {
		t.Fatalf("takes of 7.5 within 100: %d went through, want 13", taken.Load())
	}
	later := newInstance() // after a restart
	if ok, err := later.Take(ctx, "ops-1", "2026-11-28", d("2.51"), limit); ok || err != nil {
		t.Errorf("2.51 more on 97.5: %v, %v; want refused", ok, err)
	}
	if ok, err := later.Take(ctx, "ops-1", "2026-11-28", d("2.5"), limit); !ok || err != nil {
		t.Errorf("2.5 more, to exactly 100: %v, %v; want taken", ok, err)
	}
	// A give-back makes room again.
	if err := later.Give(ctx, "ops-1", "2026-11-28", d("7.5")); err != nil {
		t.Fatal(err)
	}
	if ok, err := instances[0].Take(ctx, "ops-1", "2026-11-28", d("7.5"), limit); !ok || err != nil {
		t.Errorf("7.5 after 7.5 given back: %v, %v; want taken", ok, err)
	}
	// Other operators and other days have their own.
	for _, k := range [][2]string{{"ops-2", "2026-11-28"}, {"ops-1", "2026-11-29"}} {
		if ok, err := later.Take(ctx, k[0], k[1], limit, limit); !ok || err != nil {
			t.Errorf("%v: the whole limit: %v, %v; want taken", k, ok, err)
		}
	}
	// More than the limit at once never fits.
	if ok, err := later.Take(ctx, "ops-3", "2026-11-28", d("100.01"), limit); ok || err != nil {
		t.Errorf("more than the limit: %v, %v; want refused", ok, err)
	}
}

func TestMemory(t *testing.T) {
	t.Parallel()
	m := auth.NewMemoryAllowances()
	contract(t, func() auth.Allowances { return m })
}

func TestDynamoDB(t *testing.T) {
	t.Parallel()
	env := dynamotest.New(t)
	contract(t, func() auth.Allowances { return allowance.New(env.Client, env.Leases) })
	got, err := allowance.New(env.Client, env.Leases).Taken(context.Background(), "ops-1", "2026-11-28")
	if err != nil || !got.Equal(decimal.RequireFromString("100")) {
		t.Errorf("ops-1's total: %v, %v; want 100", got, err)
	}
}
