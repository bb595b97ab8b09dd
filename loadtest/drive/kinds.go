package drive

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/shopspring/decimal"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
)

// Kinds is what the kinds scenario needs besides its sender: the
// PointKindService (with an admin token) it creates the program's kinds
// with before the run, and what its purchases were refused for.
type Kinds struct {
	Admin pointledgerv1connect.PointKindServiceClient

	mu       sync.Mutex
	refusals map[string]int64 // purchases refused, by reason (or code)
}

// A program shaped like a Japanese one: standard points (通常, the
// built-in kind), limited-time campaign points (期間限定) spent first and
// expiring within days, store-only points (ストア限定) for two merchants,
// and points barred from exchange into another program (用途限定).
var (
	// ProgramKinds are the kinds the scenario creates.
	ProgramKinds = []*pb.CreatePointKindRequest{
		{KindId: "lt-campaign", Description: "limited-time campaign points", Priority: int32Of(10)},
		{KindId: "lt-store-a", Description: "points for shop-a only", Priority: int32Of(30), Merchants: []string{"shop-a"}},
		{KindId: "lt-store-b", Description: "points for shop-b only", Priority: int32Of(30), Merchants: []string{"shop-b"}},
		{KindId: "lt-no-exchange", Description: "points not for exchange", Priority: int32Of(40), ExcludedCategories: []string{"exchange"}},
	}
	// KindMerchants and KindCategories are where the purchases spend ("":
	// none said).
	KindMerchants  = []string{"shop-a", "shop-b", "mall-1", "mall-2", ""}
	KindCategories = []string{"food", "fashion", "exchange", ""}
)

// CampaignTTL is how long the campaign kind's points last: days, far
// beyond a run.
const CampaignTTL = 3 * 24 * time.Hour

func int32Of(n int32) *int32 { return &n }

// Refusals are the kinds scenario's purchases refused so far, by reason.
func (k *Kinds) Refusals() map[string]int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return maps.Clone(k.refusals)
}

func (k *Kinds) refused(out Outcome) {
	if out.Code == "ok" {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.refusals == nil {
		k.refusals = map[string]int64{}
	}
	r := out.Reason
	if r == "" {
		r = out.Code
	}
	k.refusals[r]++
}

// kindsScenario: every user holds points of each kind; purchases at
// merchants and in categories that some kinds may not pay for, refunds of
// some of them, and grants of campaign points beside.
type kindsScenario struct {
	p        *Params
	mu       sync.Mutex
	refundOf []Op // acknowledged purchases not refunded yet
}

func (s *kindsScenario) Setup(ctx context.Context, send Sender) error {
	return s.p.setupKinds(ctx, send)
}

// setupKinds creates the program's kinds and grants every user -grant
// standard points and 5 x -amount of each kind.
func (p *Params) setupKinds(ctx context.Context, send Sender) error {
	k := p.Kinds
	if k == nil || k.Admin == nil {
		return errors.New("kinds: no point kind service to create the kinds with")
	}
	for _, r := range ProgramKinds {
		req := &pb.CreatePointKindRequest{KindId: r.KindId, Description: r.Description, Priority: r.Priority, Merchants: r.Merchants,
			Categories: r.Categories, ExcludedCategories: r.ExcludedCategories, RequestId: "kind-" + r.KindId + "-" + p.RunID}
		_, err := k.Admin.CreatePointKind(ctx, connect.NewRequest(req))
		// A kind made by an earlier invocation on the same tables (-target)
		// is used as it is: the checks read the kinds after the run.
		if err != nil && connect.CodeOf(err) != connect.CodeAlreadyExists {
			return fmt.Errorf("create point kind %s: %w", r.KindId, err)
		}
	}
	units := func(n int64) decimal.Decimal { return p.Amount.Mul(decimal.NewFromInt(n)) }
	return seed(ctx, send, p.Users, func(i int) []Op {
		u := p.userName(i)
		return []Op{
			{Kind: "grant", User: u, RequestID: "grant-" + u, Amount: p.Grant},
			{Kind: "grant", User: u, RequestID: "grant-campaign-" + u, Amount: units(5), PointKind: "lt-campaign", TTL: CampaignTTL},
			{Kind: "grant", User: u, RequestID: "grant-store-a-" + u, Amount: units(5), PointKind: "lt-store-a"},
			{Kind: "grant", User: u, RequestID: "grant-store-b-" + u, Amount: units(5), PointKind: "lt-store-b"},
			{Kind: "grant", User: u, RequestID: "grant-no-exchange-" + u, Amount: units(5), PointKind: "lt-no-exchange"},
		}
	})
}

// Of 100 steps: 10 refunds, 5 grants of campaign points, 85 purchases
// (of which 2 in 100 ask for more than the user holds).
func (s *kindsScenario) Step(ctx context.Context, rng *rand.Rand, send Sender) {
	user := s.p.userName(rng.IntN(s.p.Users))
	switch x := rng.IntN(100); {
	case x < 10:
		s.mu.Lock()
		if n := len(s.refundOf); n > 0 {
			i := rng.IntN(n)
			p := s.refundOf[i]
			s.refundOf[i] = s.refundOf[n-1]
			s.refundOf = s.refundOf[:n-1]
			s.mu.Unlock()
			send(ctx, Op{Kind: "refund", User: p.User, RequestID: s.p.newID("r"), Amount: p.Amount, Purchase: p.RequestID})
			return
		}
		s.mu.Unlock()
	case x < 15:
		send(ctx, Op{Kind: "grant", User: user, RequestID: s.p.newID("g"), Amount: s.p.Amount.Mul(decimal.NewFromInt(3)),
			PointKind: "lt-campaign", TTL: CampaignTTL})
		return
	}
	o := Op{Kind: "purchase", User: user, RequestID: s.p.newID("p"), Amount: s.p.Amount}
	o.Merchant, o.Category = where(rng)
	if rng.IntN(100) < 2 {
		// More than the user was ever granted: refused, INSUFFICIENT_BALANCE
		// with what it could have spent there, and counted by reason.
		o.Amount = s.p.Grant.Add(s.p.Amount.Mul(decimal.NewFromInt(100)))
	}
	out := send(ctx, o)
	s.p.Kinds.refused(out)
	if out.Code == "ok" {
		s.mu.Lock()
		s.refundOf = append(s.refundOf, o)
		s.mu.Unlock()
	}
}

// where picks a purchase's merchant and category.
func where(rng *rand.Rand) (merchant, category string) {
	return KindMerchants[rng.IntN(len(KindMerchants))], KindCategories[rng.IntN(len(KindCategories))]
}
