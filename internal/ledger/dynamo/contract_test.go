package dynamo

import (
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/dynamotest"
	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
)

var _ ledger.Store = (*Ledger)(nil)

func TestContract(t *testing.T) {
	t.Parallel()
	ledgertest.Contract(t, func(t *testing.T, now func() time.Time) ledger.Store {
		env := dynamotest.New(t)
		return New(env.Client, Options{Table: env.Ledger, Now: now})
	})
}
