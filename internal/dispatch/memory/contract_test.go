package memory_test

import (
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/dispatch/dispatchtest"
	"github.com/pointledger/pointledger/internal/dispatch/memory"
	ledgermemory "github.com/pointledger/pointledger/internal/ledger/memory"
)

// The dispatcher's contract in memory: no emulator, no SDK. DynamoDB's
// throttling and ledgerd's notice finder (on DynamoDB) have no stand-in
// here; those cases skip or leave the notice out.
func TestContract(t *testing.T) {
	t.Parallel()
	dispatchtest.Contract(t, func(t *testing.T, now func() time.Time) dispatchtest.Env {
		t.Helper()
		s := memory.New(now)
		return dispatchtest.Env{Store: s, Ledger: ledgermemory.New(now), Crash: s.Crash}
	})
}
