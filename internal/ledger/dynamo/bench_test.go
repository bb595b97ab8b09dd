package dynamo

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/ddbproxy"
	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/migrations"
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

// BenchmarkGroupLayout shows what bounds group commit on one hot user in
// DynamoDB Local: a transaction's time grows with its items, so the items a
// purchase needs decide how many purchases one transaction can carry, and so
// a hot user's purchases per second. Each iteration is one transaction for
// one user, one after another, as ledgerd's committer sends them, on a fresh
// emulator per layout (warmed up for 20 s on another user). Run:
//
//	go test -run '^$' -bench GroupLayout -benchtime 400x ./internal/ledger/dynamo/
//
// and, to send the measured transactions through the proxy with the load
// test's hot-user latency (the warm-up goes straight to the emulator):
//
//	go test -run '^$' -bench GroupLayout -benchtime 400x ./internal/ledger/dynamo/ -args -bench-latency 10ms
//
// DynamoDB Local's transaction takes longer as the user's partition grows:
// -bench-prefill N writes N purchases of the measured user first (in full
// groups, straight to the emulator), so that the measured transactions see
// the partition the load test's hot user has in its measurement (about
// 50,000 purchases after its 30 s warm-up, 100,000 at its end):
//
//	go test -run '^$' -bench 'GroupLayout/(alone|grouped)$' -benchtime 400x ./internal/ledger/dynamo/ -args -bench-latency 10ms -bench-prefill 60000
//
// The layouts:
//
//   - alone: one purchase, grouping off: account, entry, request record (3 items);
//   - grouped: 49 purchases in this package's layout: the account and 49 entries
//     and request records (99 items, the most a transaction allows);
//   - alone-lsi, grouped-lsi: a layout this project does not use, measured for
//     comparison: the entry, keyed by its request id, is its own idempotency
//     record, and a local secondary index orders the entries by version, so a
//     purchase is one item (2 items alone) and one transaction carries 99
//     purchases (100 items). On DynamoDB an LSI also costs a write per entry
//     and caps a user's items at 10 GB.
//
// grouped ÷ alone is then the most group commit can gain over batching off in
// each layout, with no time spent in ledgerd.
func BenchmarkGroupLayout(b *testing.B) {
	for _, c := range []struct {
		name      string
		purchases int  // per transaction
		lsi       bool // entries keyed by request id, ordered by an index
	}{{"alone", 1, false}, {"grouped", DefaultMaxBatch, false}, {"alone-lsi", 1, true}, {"grouped-lsi", 99, true}} {
		b.Run(c.name, func(b *testing.B) {
			env := dynamotest.NewFresh(b)
			ctx := context.Background()
			db := env.Client // where the measured transactions go
			if *benchLatency > 0 {
				p, err := ddbproxy.Start(ddbproxy.Options{Target: env.Endpoint, Latency: *benchLatency})
				if err != nil {
					b.Fatal(err)
				}
				defer p.Close()
				db = dynamolocal.NewClient(p.URL)
			}
			table := env.Ledger
			if c.lsi {
				table = env.Prefix + "ledger_lsi"
				if err := createLSITable(ctx, env.Client, table); err != nil {
					b.Fatal(err)
				}
			}
			now := time.Now().UTC()
			versions := map[string]int64{}
			send := func(db *dynamodb.Client, user string, i, purchases int) {
				version := versions[user]
				items := []types.TransactWriteItem{{Put: &types.Put{TableName: &table, Item: accountItemForBench(user, version+int64(purchases))}}}
				for j := range purchases {
					version++
					m := mutation(b, ledger.EntryPurchase, user, fmt.Sprintf("p%d-%d", i, j), "1")
					e := ledger.Entry{ID: "01JBENCH0000000000000000000", UserID: user, Version: version, Type: m.Type,
						Amount: m.Delta(), BalanceAfter: decimal.NewFromInt(1e9 - version), RequestID: m.RequestID, CreateTime: now}
					cond := aws.String("attribute_not_exists(PK)")
					if c.lsi {
						item := entryItem(e)
						item["V"] = item["SK"]
						item["SK"] = ddbattr.S(requestPrefix + m.RequestID)
						item["request_hash"] = ddbattr.S(m.Hash())
						items = append(items, types.TransactWriteItem{Put: &types.Put{TableName: &table, Item: item, ConditionExpression: cond}})
						continue
					}
					items = append(items,
						types.TransactWriteItem{Put: &types.Put{TableName: &table, Item: entryItem(e), ConditionExpression: cond}},
						types.TransactWriteItem{Put: &types.Put{TableName: &table, Item: requestItem(m, e, e.Version), ConditionExpression: cond}})
				}
				if _, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items}); err != nil {
					b.Fatal(err)
				}
				versions[user] = version
			}
			// The emulator's JIT compiler takes tens of seconds to reach its
			// steady speed (see docs/testing.md, the load test).
			for i, warm := 0, time.Now(); time.Since(warm) < benchWarmup; i++ {
				send(env.Client, "warm", i, c.purchases)
			}
			// -bench-prefill: the hot user's partition holds that many
			// purchases before the measured ones (a transaction's time grows
			// with it), sent in full groups straight to the emulator.
			for i := 0; versions["hot"] < int64(*benchPrefill); i++ {
				send(env.Client, "hot", -1-i, min(*benchPrefill-int(versions["hot"]), maxPurchases(c.lsi)))
			}
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				send(db, "hot", i, c.purchases)
			}
			elapsed := time.Since(start)
			b.ReportMetric(float64(b.N*c.purchases)/elapsed.Seconds(), "purchases/s")
			b.ReportMetric(float64(elapsed.Microseconds())/1000/float64(b.N), "ms/txn")
		})
	}
}

var benchLatency = flag.Duration("bench-latency", 0, "BenchmarkGroupLayout: send the measured transactions through the DynamoDB proxy with this much latency per call")

var benchPrefill = flag.Int("bench-prefill", 0, "BenchmarkGroupLayout: purchases of the measured user written before the measured transactions (the load test's hot user has about 50,000 after its 30 s warm-up)")

// maxPurchases is the most purchases one transaction of the layout carries.
func maxPurchases(lsi bool) int {
	if lsi {
		return 99
	}
	return DefaultMaxBatch
}

// benchWarmup is how long BenchmarkGroupLayout warms each emulator up.
const benchWarmup = 20 * time.Second

func accountItemForBench(user string, version int64) map[string]types.AttributeValue {
	item := accountKey(user)
	item["balance"] = ddbattr.Int(1e9 - version)
	item["version"] = ddbattr.Int(version)
	return item
}

// createLSITable creates a copy of the ledger table (migrations/) whose items
// also carry V, the entry's sort key by version, indexed by a local secondary
// index.
func createLSITable(ctx context.Context, db *dynamodb.Client, table string) error {
	all, err := migrations.All("")
	if err != nil {
		return err
	}
	i := slices.IndexFunc(all, func(m migrations.Migration) bool { return *m.Input.TableName == migrations.LedgerTable })
	in := all[i].Input
	in.TableName = &table
	in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{AttributeName: aws.String("V"), AttributeType: types.ScalarAttributeTypeS})
	in.LocalSecondaryIndexes = []types.LocalSecondaryIndex{{
		IndexName:  aws.String("by_version"),
		KeySchema:  []types.KeySchemaElement{in.KeySchema[0], {AttributeName: aws.String("V"), KeyType: types.KeyTypeRange}},
		Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
	}}
	_, err = db.CreateTable(ctx, &in)
	return err
}
