package shardpass_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/ledger/memory"
	"github.com/pointledger/pointledger/internal/shardpass"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func key(shard int) string { return "TEST#" + string(rune('a'+shard)) }

// users are the due users of each shard: "<shard>-<i>".
func due(n int) func(context.Context, func(string) error) error {
	return func(_ context.Context, fn func(string) error) error {
		for i := range 3 {
			if err := fn(string(rune('a'+n)) + "-" + string(rune('0'+i))); err != nil {
				return err
			}
		}
		return nil
	}
}

// A pass works each shard no one else holds, each due user once, and lets
// every lease go after it.
func TestAPassWorksEveryFreeShardOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	leases := memory.NewLeases(nil)
	unlock, err := leases.Lock(ctx, key(2), "other", time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var worked []string
	pass := shardpass.New(leases, key, shardpass.Options{Shards: 4, Owner: "me", Workers: 2, Log: quiet, Name: "test"})
	n, err := pass.Run(ctx, func(shard int) shardpass.Shard {
		return shardpass.Shard{Due: due(shard), Each: func(_ context.Context, user string) error {
			mu.Lock()
			defer mu.Unlock()
			worked = append(worked, user)
			return nil
		}}
	})
	if err != nil || n != 3 {
		t.Fatalf("Run = %d, %v; want 3 shards (shard 2 is held)", n, err)
	}
	slices.Sort(worked)
	want := []string{"a-0", "a-1", "a-2", "b-0", "b-1", "b-2", "d-0", "d-1", "d-2"}
	if !slices.Equal(worked, want) {
		t.Errorf("worked %v, want %v", worked, want)
	}
	if err := unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for shard := range 4 { // every lease let go: another owner takes each
		if _, err := leases.Lock(ctx, key(shard), "next", time.Minute, nil); err != nil {
			t.Errorf("shard %d after the pass: %v, want it free", shard, err)
		}
	}
}

// A user that fails stops its shard and the pass; the error names the
// shard, the shards before it are counted, and its lease is let go.
func TestAFailureStopsThePass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	leases := memory.NewLeases(nil)
	boom := errors.New("boom")
	pass := shardpass.New(leases, key, shardpass.Options{Shards: 4, Owner: "me", Log: quiet, Name: "test"})
	var calls []int
	n, err := pass.Run(ctx, func(shard int) shardpass.Shard {
		calls = append(calls, shard)
		return shardpass.Shard{Due: due(shard), Each: func(_ context.Context, user string) error {
			if user == "b-1" {
				return boom
			}
			return nil
		}}
	})
	if !errors.Is(err, boom) || n != 1 || err.Error() != "test of shard 1: boom" {
		t.Fatalf("Run = %d, %v; want 1 shard and %q", n, err, "test of shard 1: boom")
	}
	if !slices.Equal(calls, []int{0, 1}) {
		t.Errorf("shards begun: %v, want 0 and 1", calls)
	}
	if _, err := leases.Lock(ctx, key(1), "next", time.Minute, nil); err != nil {
		t.Errorf("the failed shard's lease: %v, want it let go", err)
	}
}

var _ shardpass.Leases = (*memory.Leases)(nil)
