// Package dynamotest gives tests a real DynamoDB: one DynamoDB Local per test
// binary, started on first use on a free port (in memory), and fresh tables
// for every test.
//
// A test package that uses it says so in TestMain:
//
//	func TestMain(m *testing.M) { dynamotest.Main(m) }
package dynamotest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/pointledger/pointledger/internal/dynamolocal"
	"github.com/pointledger/pointledger/migrations"
)

var (
	once     sync.Once
	emulator *dynamolocal.Emulator
	startErr error
	tables   atomic.Int64
)

// Main runs the tests, stops the emulator if one was started, and exits.
func Main(m *testing.M) { os.Exit(Run(m)) }

// MainWithoutStreams is Main for a package whose tests never read a
// table's stream: its tables are made without one. DynamoDB Local spends
// most of its CPU keeping stream records, more as they pile up (even those
// of tables since deleted): internal/ledger/dynamo's tests took 255 s of
// CPU with streams and 59 s without, measured with
// `/usr/bin/time go test -race -count=1 ./internal/ledger/dynamo`. A test
// that reads a stream anyway fails: the table has none.
func MainWithoutStreams(m *testing.M) {
	withoutStreams = true
	os.Exit(Run(m))
}

// withoutStreams is set by MainWithoutStreams before any test runs.
var withoutStreams bool

// Run is Main for a TestMain with cleaning up of its own: it runs the tests,
// stops the emulator if one was started, and returns the exit code.
func Run(m *testing.M) int {
	code := m.Run()
	if emulator != nil {
		emulator.Stop()
	}
	return code
}

// Emulator returns the test binary's DynamoDB Local, starting it if needed.
func Emulator(tb testing.TB) *dynamolocal.Emulator {
	tb.Helper()
	once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		emulator, startErr = dynamolocal.Start(ctx, dynamolocal.Options{JVMFlags: dynamolocal.TestJVMFlags})
	})
	if startErr != nil {
		tb.Fatalf("DynamoDB Local: %v", startErr)
	}
	return emulator
}

// Env is a test's own set of tables on the shared emulator.
type Env struct {
	Client   *dynamodb.Client
	Endpoint string
	Prefix   string // table name prefix, unique to the test
	Ledger   string // full names of the tables
	History  string
	Leases   string
	Webhooks string // endpoints, delivery queues and rows, notices
}

// New creates the migrations' tables under a prefix of the test's own and
// deletes them when the test ends.
func New(tb testing.TB) *Env {
	tb.Helper()
	return newEnv(tb, Emulator(tb))
}

// NewFresh is New on an emulator of its own, stopped when the test ends.
// Benchmarks use it: DynamoDB Local slows down as the records of earlier
// writes (stream records among them) pile up, even in tables since deleted.
func NewFresh(tb testing.TB) *Env {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e, err := dynamolocal.Start(ctx, dynamolocal.Options{})
	if err != nil {
		tb.Fatalf("DynamoDB Local: %v", err)
	}
	tb.Cleanup(e.Stop)
	return newEnv(tb, e)
}

func newEnv(tb testing.TB, e *dynamolocal.Emulator) *Env {
	tb.Helper()
	env := &Env{
		Client:   dynamolocal.NewClient(e.Endpoint),
		Endpoint: e.Endpoint,
		Prefix:   fmt.Sprintf("t%d_", tables.Add(1)),
	}
	env.Ledger = env.Prefix + migrations.LedgerTable
	env.History = env.Prefix + migrations.HistoryTable
	env.Leases = env.Prefix + migrations.LeaseTable
	env.Webhooks = env.Prefix + migrations.WebhookTable
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	all, err := migrations.All(env.Prefix)
	if err != nil {
		tb.Fatalf("migrations: %v", err)
	}
	if withoutStreams {
		for i := range all {
			all[i].Input.StreamSpecification = nil
		}
	}
	if err := migrations.Create(ctx, env.Client, all, log); err != nil {
		tb.Fatalf("apply migrations: %v", err)
	}
	tb.Cleanup(func() {
		for _, m := range all {
			_, _ = env.Client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: m.Input.TableName})
		}
	})
	return env
}
