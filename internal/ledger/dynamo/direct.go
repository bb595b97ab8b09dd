package dynamo

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/pointledger/pointledger/internal/ledger"
)

// SingleTransaction is the transaction the write path sends for one grant or
// purchase m on acct when it commits alone (grouping off), built as the
// write path builds it: decided by ledger.Decide on acct at now, and its
// items added by the same builder (txn), with the same conditions. It is
// exported for the load test's direct baseline, which sends it without
// ledgerd, one TransactWriteItems per mutation and no read, to measure the
// ceiling of the service, and for the benchmarks.
//
// It returns the entry the transaction writes (its id entryID) and the
// account after it. The caller checks that acct covers a purchase, as the
// baseline does: a mutation the domain refuses gets the transaction that
// records its refusal, as the write path's would, with no entry.
func SingleTransaction(table string, acct ledger.Account, m ledger.Mutation, entryID string, now time.Time) (*dynamodb.TransactWriteItemsInput, ledger.Entry, ledger.Account) {
	t := newTxn(&table, givenID(entryID), acct, now.UTC().Truncate(time.Microsecond))
	c := &call{m: m}
	info, _ := m.Type.Info()
	// A grant or a purchase needs no facts beyond the account.
	if dec, err := ledger.Decide(t.running, m, t.now, ledger.Facts{}); err != nil {
		t.refuse(c, err)
	} else {
		t.join(c, info, dec, requestRecord{})
	}
	g := t.close()
	var e ledger.Entry
	if len(g.members) > 0 {
		e = g.members[0].entry
	}
	return &dynamodb.TransactWriteItemsInput{TransactItems: g.items}, e, g.after
}

// givenID is the one id an entry of SingleTransaction gets.
type givenID string

func (id givenID) newID(time.Time) string { return string(id) }
