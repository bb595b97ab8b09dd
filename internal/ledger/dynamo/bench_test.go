package dynamo

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
)

// Where a purchase's time goes, against DynamoDB Local, with 16 callers
// (RunParallel with parallelism 16/GOMAXPROCS). Run:
//
//	go test -run '^$' -bench . -benchtime 2000x ./internal/ledger/dynamo/
//
// ApplyPurchase is the whole write path (consistent read + transaction);
// TransactWriteItems sends the same three items without the read (the
// ceiling for this path); GetItem is the read alone.

const benchUsers = 1000

func benchLedger(b *testing.B) *Ledger {
	b.Helper()
	env := dynamotest.NewFresh(b)
	l := New(env.Client, Options{Table: env.Ledger})
	for i := range benchUsers {
		mustApply(b, l, mutation(b, ledger.EntryGrant, fmt.Sprint("u", i), "g", "1000000000"))
	}
	return l
}

func parallel16(b *testing.B, f func(i int64)) {
	b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
	var n atomic.Int64
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			f(n.Add(1))
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "ops/s")
}

func BenchmarkApplyPurchase(b *testing.B) {
	l := benchLedger(b)
	parallel16(b, func(i int64) {
		m := mutation(b, ledger.EntryPurchase, fmt.Sprint("u", i%benchUsers), fmt.Sprint("p", i), "1")
		if _, err := l.Apply(context.Background(), m); err != nil {
			b.Error(err)
		}
	})
}

func BenchmarkTransactWriteItems(b *testing.B) {
	l := benchLedger(b)
	// Each user's version is tracked here, as a caller that never reads would.
	versions := make([]atomic.Int64, benchUsers)
	for i := range versions {
		versions[i].Store(1)
	}
	var failed atomic.Int64
	defer func() { b.ReportMetric(float64(failed.Load())/float64(b.N), "failed/op") }()
	parallel16(b, func(i int64) {
		u := i % benchUsers
		v := versions[u].Add(1)
		m := mutation(b, ledger.EntryPurchase, fmt.Sprint("u", u), fmt.Sprint("p", i), "1")
		// Version v-1 follows the grant and v-2 purchases of 1.
		acct := ledger.Account{UserID: m.UserID, Version: v - 1, Balance: decimal.NewFromInt(1e9 - (v - 2)), Status: ledger.StatusActive}
		in, _, _ := SingleTransaction(l.table, acct, m, l.newID(time.Now()), time.Now())
		if _, err := l.db.TransactWriteItems(context.Background(), in); err != nil {
			// Two callers on one user may interleave and one fails its
			// condition: counted, so that a run of failures shows.
			failed.Add(1)
		}
	})
}

func BenchmarkGetItem(b *testing.B) {
	l := benchLedger(b)
	parallel16(b, func(i int64) {
		if _, err := l.account(context.Background(), fmt.Sprint("u", i%benchUsers)); err != nil {
			b.Error(err)
		}
	})
}
