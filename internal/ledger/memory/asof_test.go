package memory

import (
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/ledgertest"
)

var _ ledgertest.AsOfStore = (*Store)(nil)

func TestAsOfContract(t *testing.T) {
	t.Parallel()
	ledgertest.AsOfContract(t, func(_ *testing.T, now func() time.Time) ledgertest.AsOfStore { return New(now) })
}
