package faulttest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/ledger"
)

// Point kinds in the load: half the non-expiring grants are store-only
// points ("shop", spendable at m1 only, priority 5: spent first there),
// the expiring ones limited-time points ("limited", priority 10, spent
// first elsewhere); purchases and holds are made at m1, at m9 or nowhere in
// particular. The reconciliation after the run audits every user with the
// kinds: a draw of an ineligible bucket, or a kind's buckets other than
// the fold of its entries, is a finding (ledger.Audit).
var faultKinds = []*pb.CreatePointKindRequest{
	{KindId: "limited", Priority: ptr(int32(10)), RequestId: "create-limited"},
	{KindId: "shop", Priority: ptr(int32(5)), Merchants: []string{"m1"}, RequestId: "create-shop"},
}

func ptr[T any](v T) *T { return &v }

// createKinds creates the load's kinds through the first ledgerd, retried
// through faults until the answer is definite (a creation is idempotent).
func (s *services) createKinds(t *testing.T) {
	kinds := pointledgerv1connect.NewPointKindServiceClient(http.DefaultClient, s.apis[0], connect.WithInterceptors(auth.Bearer(s.adminToken)))
	for _, req := range faultKinds {
		var err error
		for range maxAttempts {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err = kinds.CreatePointKind(ctx, connect.NewRequest(req))
			cancel()
			if err == nil || definite(connect.CodeOf(err).String()) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("create kind %s: %v", req.KindId, err)
		}
	}
}

// pointKindOf is the kind of a grant: limited-time if it expires, else
// store-only half the time.
func pointKindOf(rng *rand.Rand, expires bool) string {
	switch {
	case expires:
		return "limited"
	case rng.IntN(2) == 0:
		return "shop"
	}
	return ""
}

// merchantOf is where a purchase or a hold is made.
func merchantOf(rng *rand.Rand) string {
	return [...]string{"", "m1", "m9"}[rng.IntN(3)]
}

// checkKinds counts what the ledger's entries show of the kinds, and fails
// the run if the load did not put them to use (a grant of each kind, and a
// draw of one of them by a purchase or a capture): without them the
// audit's kinds checks saw nothing.
func checkKinds(view ledgerView, v *verdict) string {
	granted, drawn := map[string]int{}, map[string]int{}
	for _, es := range view.entries {
		for _, e := range es {
			if e.Type == ledger.EntryGrant && e.Kind != "" {
				granted[e.Kind]++
			}
			if e.Type == ledger.EntryPurchase || e.Type == ledger.EntryCapture {
				for _, d := range e.Draws {
					drawn[ledger.KindName(d.Kind)]++
				}
			}
		}
	}
	kinded := 0
	for _, k := range faultKinds {
		if granted[k.KindId] == 0 {
			v.violate("kind %s: no grant of it: the load did not use it", k.KindId)
		}
		kinded += drawn[k.KindId]
	}
	if kinded == 0 {
		v.violate("no purchase or capture drew points of a kind other than standard")
	}
	return fmt.Sprintf("point kinds: grants %v, draws by purchases and captures %v (the reconciliation audited them: no ineligible draw, each kind's buckets the fold)", granted, drawn)
}
