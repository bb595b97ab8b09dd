package dynamo

import (
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/ledger"
)

// The load test's naive baseline reads an account and writes an entry and
// the account without the write path's conditions, to show what they
// prevent. These give it the item layout, so that it never spells a key or
// an attribute of its own.

// AccountKey is the key of user's account item.
func AccountKey(user string) map[string]types.AttributeValue { return accountKey(user) }

// DecodeAccount reads an account from its item; ok is false for an empty
// item.
func DecodeAccount(item map[string]types.AttributeValue) (a ledger.Account, ok bool, err error) {
	return decodeAccount(item)
}

// EntryItem is the item of entry e, its key included.
func EntryItem(e ledger.Entry) map[string]types.AttributeValue { return entryItem(e) }

// AccountItem is the whole item of account a, as the write path's updates
// leave it: the expiring buckets only if some expire, what is held only if
// something is.
func AccountItem(a ledger.Account) map[string]types.AttributeValue {
	item := accountKey(a.UserID)
	item["user_id"] = ddbattr.S(a.UserID)
	item["balance"] = ddbattr.Decimal(a.Balance)
	item["version"] = ddbattr.Int(a.Version)
	item["status"] = ddbattr.S(string(a.Status))
	item["create_time"] = ddbattr.S(formatTime(a.CreateTime))
	item["update_time"] = ddbattr.S(formatTime(a.UpdateTime))
	if expires(a.Buckets) {
		item["buckets"] = bucketsItem(a.Buckets)
	}
	if len(a.Holds) > 0 {
		item["held"] = ddbattr.Decimal(a.Held)
		item["holds"] = holdsItem(a.Holds)
	}
	return item
}
