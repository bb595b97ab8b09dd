package dynamo

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/pointledger/pointledger/internal/ddbhttp"
	"github.com/pointledger/pointledger/internal/ddbwire"
	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
)

var _ ledger.Store = (*Ledger)(nil)

// TestContract runs the contract with group commit and without (MaxBatch
// 1): money must behave the same either way, under the contract's
// concurrent purchases, copies of one request and storms as well. After
// each test every user of its table is audited (Audit: also request records
// and refund caps, which the contract cannot see).
func TestContract(t *testing.T) {
	t.Parallel()
	for _, maxBatch := range []int{0, 1} {
		t.Run(fmt.Sprint("max batch ", maxBatch), func(t *testing.T) {
			t.Parallel()
			newStore := func(t *testing.T, now func() time.Time) ledger.Store {
				env := dynamotest.New(t)
				l := New(env.Client, Options{Table: env.Ledger, Now: now, MaxBatch: maxBatch})
				t.Cleanup(func() { auditEveryone(t, l) })
				return l
			}
			ledgertest.Contract(t, newStore)
		})
	}
}

// TestContractLeanWrites runs the contract with the write path's
// transactions sent by internal/ddbwire, as ledgerd sends them (issue 37),
// with group commit: the same money behaviour as through the SDK.
func TestContractLeanWrites(t *testing.T) {
	t.Parallel()
	ledgertest.Contract(t, func(t *testing.T, now func() time.Time) ledger.Store {
		env := dynamotest.New(t)
		l := New(leanWrites(t, env.Client), Options{Table: env.Ledger, Now: now})
		t.Cleanup(func() { auditEveryone(t, l) })
		return l
	})
}

// leanWrites is db with its TransactWriteItems sent by ddbwire, on its own
// connections with the settings of the HTTP client db has, as ledgerd's.
func leanWrites(t *testing.T, db *dynamodb.Client) API {
	t.Helper()
	c, err := ddbwire.New(context.Background(), db, ddbwire.Options{HTTPClient: ddbhttp.Unwrap(db.Options().HTTPClient), OwnConns: true})
	if err != nil {
		t.Fatal(err)
	}
	if !c.OwnConns() {
		t.Fatal("ddbwire sends through the HTTP client, not its own connections")
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// auditEveryone audits every user of l's table.
func auditEveryone(t *testing.T, l *Ledger) {
	t.Helper()
	ctx := context.Background()
	users := 0
	err := l.Users(ctx, 1, nil, func(user string) error {
		users++
		a, err := l.Audit(ctx, user)
		for _, f := range a.Findings {
			t.Errorf("audit: %s", f)
		}
		return err
	})
	if err != nil || users == 0 {
		t.Errorf("audit of every user: %d users, %v", users, err)
	}
}

// TestKindContract runs the kinds' suite on DynamoDB Local, every user
// audited after each test (with the kinds: no ineligible draw).
func TestKindContract(t *testing.T) {
	t.Parallel()
	ledgertest.KindContract(t, func(t *testing.T, now func() time.Time) ledgertest.KindStore {
		env := dynamotest.New(t)
		l := New(env.Client, Options{Table: env.Ledger, Now: now})
		t.Cleanup(func() { auditEveryone(t, l) })
		return l
	})
}
