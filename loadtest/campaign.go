package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/client"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/loadtest/check"
	"github.com/pointledger/pointledger/loadtest/drive"
	"github.com/pointledger/pointledger/loadtest/report"
)

// campaignRuns measures the campaign scenario once for each of
// -campaign-shards, in turn, each on a fresh emulator: one budget item
// against the sharded budget, in one invocation.
func (r *runner) campaignRuns(ctx context.Context, c fleetConfig) error {
	for _, k := range r.f.campaignShards {
		r.campaign = &campaignRun{shards: k, grants: r.f.campaignGrants}
		if _, err := r.ledgerd(ctx, fmt.Sprintf("%s-shards-%d", c.runName(), k), c, 0); err != nil {
			return err
		}
	}
	r.campaign = nil
	return nil
}

// campaignRun is one run of the campaign scenario: its budget's shards and
// size, and, once prepared, the budget the scenario draws on.
type campaignRun struct {
	shards, grants int
	c              *drive.Campaign
}

// prepare gives the run's parameters their budget, created with the admin
// token through ledgerd at url, and has the grants begin with the
// measurement.
func (cr *campaignRun) prepare(p *drive.Params, rec *drive.Recorder, hc *http.Client, url, adminToken string) {
	if cr == nil {
		return
	}
	cr.c = &drive.Campaign{
		Budgets:  pointledgerv1connect.NewBudgetServiceClient(hc, url, connect.WithInterceptors(client.Bearer(adminToken))),
		BudgetID: "campaign-" + p.RunID + "-" + p.UserTag, Shards: cr.shards, Grants: cr.grants,
		Amount: p.Amount.Mul(decimal.NewFromInt(campaignGrantUnits)),
	}
	cr.c.End = rec.EndNow // the rest of -duration would measure purchases alone
	p.Campaign = cr.c
	rec.OnMeasure(cr.c.Begin, nil)
}

func secondsOf(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// campaignGrantUnits: a grant from the budget is this many times -amount
// (a purchase).
const campaignGrantUnits = 10

// figures puts the campaign's figures on the run.
func (cr *campaignRun) figures(run *report.Run) {
	if cr == nil || cr.c == nil {
		return
	}
	f := cr.c.Figures(secondsOf(run.DurationS))
	run.Campaign = &f
}

// check checks the run's budget against the book and the entries. The
// run is in the report already: run.Campaign is the report's too, and
// gets the budget as read after the run.
func (cr *campaignRun) check(ctx context.Context, chk *check.Checker, budgets check.Budgets, b *check.Book, run report.Run, inv *report.Invariants) error {
	if cr == nil || run.Campaign == nil {
		return nil
	}
	return chk.Campaign(ctx, budgets, b, run.Campaign, inv)
}

// parseShards reads -campaign-shards: "1,32".
func parseShards(s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || k < 1 || k > 64 {
			return nil, fmt.Errorf("-campaign-shards %q: want a list of escrow shard counts from 1 to 64, as 1,32", s)
		}
		out = append(out, k)
	}
	if len(out) == 0 {
		return nil, errors.New("-campaign-shards: want at least one shard count")
	}
	return out, nil
}
