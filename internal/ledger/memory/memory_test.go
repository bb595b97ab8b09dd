package memory

import (
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/ledgertest"
)

func TestContract(t *testing.T) {
	t.Parallel()
	ledgertest.Contract(t, func(_ *testing.T, now func() time.Time) ledger.Store { return New(now) })
}
