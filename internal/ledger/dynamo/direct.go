package dynamo

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ledger"
)

// SingleTransaction is the transaction the write path sends for one grant or
// purchase m on acct when it commits alone (grouping off): the account
// update, the entry and the request record, with the same conditions. It is
// exported for the load test's direct baseline, which sends it without
// ledgerd to measure the ceiling of the service, and for the benchmarks.
//
// It returns the entry the transaction writes and the account after it.
func SingleTransaction(table string, acct ledger.Account, m ledger.Mutation, entryID string, now time.Time) (*dynamodb.TransactWriteItemsInput, ledger.Entry, ledger.Account) {
	now = now.UTC().Truncate(time.Microsecond)
	e := ledger.Entry{
		ID: entryID, UserID: m.UserID, Version: acct.Version + 1, Type: m.Type, Amount: m.Delta(),
		BalanceAfter: acct.Balance.Add(m.Delta()), RequestID: m.RequestID, OrderID: m.OrderID,
		CreateTime: now, Metadata: m.Metadata,
	}
	after := acct
	if acct.Version == 0 {
		after = ledger.NewAccount(m.UserID)
		after.CreateTime = now
	}
	after.Balance, after.Version, after.UpdateTime = e.BalanceAfter, e.Version, now
	need := m.Amount
	if !m.Spends() {
		need = need.Sub(need) // zero: a grant needs no starting balance
	}
	purchase := m.Type == ledger.EntryPurchase
	return &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Update: accountUpdate(table, acct, after, accountCondition(acct, purchase, need))},
		{Put: &types.Put{TableName: &table, Item: entryItem(e), ConditionExpression: aws.String("attribute_not_exists(PK)")}},
		{Put: &types.Put{TableName: &table, Item: requestItem(m, e, e.Version), ConditionExpression: aws.String("attribute_not_exists(PK)"),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}},
	}}, e, after
}
