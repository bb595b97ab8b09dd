package reconcile

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledger/dynamo"
	"github.com/pointledger/pointledger/internal/ledgertest"
	"github.com/pointledger/pointledger/internal/projection"
)

// How many entries a reconciliation checks per second, against a fresh
// DynamoDB Local holding 500 users and about 5000 entries, with 4 segments
// and no rate limit. Run:
//
//	go test -run '^$' -bench Reconcile -benchtime 3x ./internal/reconcile/
func BenchmarkReconcile(b *testing.B) {
	env := dynamotest.NewFresh(b)
	store := dynamo.New(env.Client, dynamo.Options{Table: env.Ledger, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	history := projection.NewHistory(env.Client, env.History, store, nil)
	users := ledgertest.Users("u", 500)
	for i, u := range users {
		m, _ := ledger.NewMutation(ledger.EntryGrant, ledger.Request{UserID: u, RequestID: "g", Amount: "1000"}, ledger.DefaultScale)
		if _, err := store.Apply(context.Background(), m); err != nil {
			b.Fatal(i, err)
		}
	}
	ledgertest.Storm(b, store, users, 16, 4500, 1)
	if _, err := history.RebuildAll(context.Background()); err != nil {
		b.Fatal(err)
	}
	rec := New(store, history, projection.NewLeaseTable(env.Client, env.Leases, nil))
	b.ResetTimer()
	var entries int64
	start := time.Now()
	for b.Loop() {
		rep, err := rec.Run(context.Background(), Options{Segments: 4, ProjectionGrace: time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		if !rep.Clean {
			b.Fatalf("not clean: %v", rep.Findings)
		}
		entries += rep.Entries
	}
	b.ReportMetric(float64(entries)/time.Since(start).Seconds(), "entries/s")
	b.ReportMetric(float64(entries)/float64(b.N), "entries/op")
}
