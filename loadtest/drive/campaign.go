package drive

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/shopspring/decimal"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/loadtest/report"
)

// Campaign is what the campaign scenario needs besides its sender: the
// budget it creates (BudgetService, with an admin token), its escrow
// shards, and its size.
type Campaign struct {
	Budgets  pointledgerv1connect.BudgetServiceClient
	BudgetID string
	Shards   int
	Grants   int             // the budget covers this many grants
	Amount   decimal.Decimal // of each grant from the budget
	// End, if set, is called once, at the first BUDGET_EXHAUSTED: the
	// campaign has done what it measures (Recorder.EndNow).
	End func()

	mu        sync.Mutex
	open      bool      // the measurement has begun: grants go out
	begun     time.Time // when it began
	exhausted bool      // a grant was answered BUDGET_EXHAUSTED: grants stop
	sent      int64     // grants sent
	acked     int64     // grants acknowledged (replays left out)
	inFlight  int64
	refusals  map[string]int64 // grants refused, by reason

	// The first BUDGET_EXHAUSTED: when it was answered, how many grants
	// had been acknowledged before it was sent, and how many had been sent
	// before it was answered (the most that can have drawn on the budget
	// before the refusal was decided).
	firstAt                 time.Time
	ackedBefore, sentBefore int64
	ackedAtFirst            int64 // acknowledged when it was answered
}

// ReasonBudgetExhausted is the reason of a grant the budget no longer
// covers.
const ReasonBudgetExhausted = "BUDGET_EXHAUSTED"

// campaignGrantShare is the share of steps, in percent, that are grants
// from the budget while it lasts; the rest are purchases.
const campaignGrantShare = 80

// Begin opens the campaign: grants go out from now (the measurement's
// start, so that the warm-up's purchases bring the emulator and ledgerd
// up to speed before the budget is drawn on).
func (c *Campaign) Begin() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open, c.begun = true, time.Now()
}

// campaign: many users, one budget; grants from the budget at full speed
// until it is exhausted, purchases beside them. Every user is seeded with
// -grant (from no budget) so that purchases have points to spend.
type campaign struct {
	p *Params
}

func (s *campaign) Setup(ctx context.Context, send Sender) error {
	c := s.p.Campaign
	if c == nil || c.Budgets == nil {
		return errors.New("campaign: no budget service to create the budget with")
	}
	if err := s.p.grantAll(ctx, send, s.p.Users); err != nil {
		return err
	}
	total := c.Amount.Mul(decimal.NewFromInt(int64(c.Grants)))
	_, err := c.Budgets.CreateBudget(ctx, connect.NewRequest(&pb.CreateBudgetRequest{BudgetId: c.BudgetID, Amount: total.String(),
		RequestId: "create-" + c.BudgetID, Description: "load test campaign", Shards: int32(c.Shards)}))
	if err != nil {
		return fmt.Errorf("create budget %s: %w", c.BudgetID, err)
	}
	return nil
}

func (s *campaign) Step(ctx context.Context, rng *rand.Rand, send Sender) {
	c := s.p.Campaign
	user := s.p.userName(rng.IntN(s.p.Users))
	c.mu.Lock()
	granting := c.open && !c.exhausted && rng.IntN(100) < campaignGrantShare
	if granting {
		c.sent++
		c.inFlight++
	}
	c.mu.Unlock()
	if !granting {
		send(ctx, Op{Kind: "purchase", User: user, RequestID: s.p.newID("p"), Amount: s.p.Amount})
		return
	}
	c.mu.Lock()
	ackedBefore := c.acked
	c.mu.Unlock()
	out := send(ctx, Op{Kind: "grant", User: user, RequestID: s.p.newID("cg"), Amount: c.Amount, Budget: c.BudgetID})
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inFlight--
	if out.Code != "ok" && c.refusals == nil {
		c.refusals = map[string]int64{}
	}
	switch {
	case out.Code == "ok":
		if !out.Replayed {
			c.acked++
		}
	case out.Reason == ReasonBudgetExhausted:
		c.refusals[out.Reason]++
		if !c.exhausted {
			c.exhausted, c.firstAt, c.ackedBefore, c.sentBefore, c.ackedAtFirst = true, now, ackedBefore, c.sent, c.acked
			if c.End != nil {
				go c.End() // not under c.mu
			}
		}
	default:
		c.refusals[out.Code+" "+out.Reason]++
	}
}

// Figures are what the campaign did: its grants a second from the start
// of the measurement until the budget was exhausted (or until the
// measurement ended, if it never was), and when the first
// BUDGET_EXHAUSTED came relative to the grants.
func (c *Campaign) Figures(measured time.Duration) report.Campaign {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := report.Campaign{BudgetID: c.BudgetID, Shards: c.Shards, Grants: int64(c.Grants), GrantAmount: c.Amount.String(),
		GrantsSent: c.sent, GrantsAcked: c.acked, Refusals: c.refusals}
	if c.begun.IsZero() {
		return f
	}
	window := measured
	if c.exhausted {
		f.Exhausted = true
		window = c.firstAt.Sub(c.begun)
		f.FirstExhaustedS = window.Seconds()
		f.AckedBeforeFirstExhausted, f.SentBeforeFirstExhausted = c.ackedBefore, c.sentBefore
		f.GrantsPerS = float64(c.ackedAtFirst) / window.Seconds()
		return f
	}
	if window > 0 {
		f.GrantsPerS = float64(c.acked) / window.Seconds()
	}
	return f
}
