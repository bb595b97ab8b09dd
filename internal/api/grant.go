package api

import (
	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/ledger"
)

// grantRequest is the ledger's request a GrantRequest makes, its times
// resolved by the program's expiry policy p.
func grantRequest(r *pb.GrantRequest, p ExpiryPolicy) (ledger.Request, error) {
	lr, err := p.creditTimes(r.ExpireTime, r.Ttl, r.EffectiveTime, r.EffectiveDelay, true)
	if err != nil {
		return ledger.Request{}, err
	}
	lr.UserID, lr.RequestID, lr.Amount, lr.OrderID, lr.Metadata = r.UserId, r.RequestId, r.Amount, r.OrderId, r.Metadata
	lr.BudgetID, lr.Kind = r.BudgetId, r.Kind
	return lr, nil
}

// CheckGrant checks r as Grant does before it reaches the ledger (fields,
// ids, amount at scale, expiry and effective time under p), and writes
// nothing: `ledgerd import -dry-run`. A refusal is a *ledger.Error with
// the reason Grant would answer. What only the ledger knows (a budget's
// remaining, an account's state) is not checked.
func CheckGrant(r *pb.GrantRequest, p ExpiryPolicy, scale int32) error {
	lr, err := grantRequest(r, p)
	if err != nil {
		return err
	}
	_, err = ledger.NewMutation(ledger.EntryGrant, lr, scale)
	return err
}
