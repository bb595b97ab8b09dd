package dynamo

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/pointledger/pointledger/internal/ddbattr"
	"github.com/pointledger/pointledger/internal/ledger"
)

// SetStatus moves a user's account to status (active or frozen) and says
// whether it changed anything. The write is conditional on the status it
// read, so two admins cannot race: of two opposite transitions from one
// state only the first applies, and the second reads the new state and
// decides again. A frozen account refuses purchases; credits still apply.
func (l *Ledger) SetStatus(ctx context.Context, user string, status ledger.Status, reason string) (ledger.Account, bool, error) {
	if err := ledger.CheckStatusChange(user, status, reason); err != nil {
		return ledger.Account{}, false, err
	}
	for range 10 {
		acct, err := l.account(ctx, user)
		if err != nil {
			return acct, false, err
		}
		if acct.Version == 0 {
			return acct, false, ledger.Errorf(ledger.KindNotFound, ledger.ReasonAccountNotFound, "user %q has no account", user)
		}
		if acct.Status == status {
			return acct, false, nil
		}
		now := l.now().UTC()
		_, err = l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                &l.table,
			Key:                      accountKey(user),
			UpdateExpression:         aws.String("SET #status = :new, status_reason = :reason, status_time = :now"),
			ConditionExpression:      aws.String("#status = :old"),
			ExpressionAttributeNames: map[string]string{"#status": "status"},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":new": ddbattr.S(string(status)), ":old": ddbattr.S(string(acct.Status)),
				":reason": ddbattr.S(reason), ":now": ddbattr.S(formatTime(now)),
			},
		})
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			continue // another admin moved it first: decide again on what is there now
		}
		if err != nil {
			return acct, false, fmt.Errorf("set status of %q: %w", user, err)
		}
		acct.Status = status
		l.forget(user) // a cached status would only cost a retry, but why pay it
		l.log.InfoContext(ctx, "account status changed", "user_id", user, "status", status, "reason", reason)
		return acct, true, nil
	}
	return ledger.Account{}, false, ledger.Errorf(ledger.KindAborted, ledger.ReasonTooManyConflicts, "the status of %q kept changing", user)
}
