package report

import (
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/shopspring/decimal"
)

// Campaign is what a campaign run did with its budget: the grants a
// second it drew until the budget was exhausted, and when the first
// BUDGET_EXHAUSTED came.
type Campaign struct {
	BudgetID    string `json:"budget_id"`
	Shards      int    `json:"shards"`
	Grants      int64  `json:"grants"` // the budget covers this many grants
	GrantAmount string `json:"grant_amount"`
	GrantsSent  int64  `json:"grants_sent"`
	GrantsAcked int64  `json:"grants_acknowledged"` // replays left out
	// GrantsPerS: grants acknowledged a second from the start of the
	// measurement to the first BUDGET_EXHAUSTED (to the end of the
	// measurement, if the budget lasted it).
	GrantsPerS float64          `json:"grants_per_s"`
	Refusals   map[string]int64 `json:"refusals,omitempty"` // grants refused or failed, by reason (or code)
	Exhausted  bool             `json:"exhausted"`
	// FirstExhaustedS: the first BUDGET_EXHAUSTED was answered this long
	// after the measurement began; AckedBeforeFirstExhausted grants had
	// been acknowledged before it was sent, SentBeforeFirstExhausted sent
	// before it was answered.
	FirstExhaustedS           float64 `json:"first_exhausted_s,omitempty"`
	AckedBeforeFirstExhausted int64   `json:"acked_before_first_exhausted,omitempty"`
	SentBeforeFirstExhausted  int64   `json:"sent_before_first_exhausted,omitempty"`
	// The budget as read after the run.
	Total     string `json:"total,omitempty"`
	Granted   string `json:"granted,omitempty"`
	Remaining string `json:"remaining,omitempty"`
}

// printCampaign writes a campaign run's figures.
func printCampaign(w io.Writer, run string, c *Campaign) {
	fmt.Fprintf(w, "%s: budget %s on %d shard(s), %d grants of %s: %d sent, %d acknowledged, %.1f grants/s; granted %s, remaining %s of %s\n",
		run, c.BudgetID, c.Shards, c.Grants, c.GrantAmount, c.GrantsSent, c.GrantsAcked, c.GrantsPerS, c.Granted, c.Remaining, c.Total)
	if c.Exhausted {
		fmt.Fprintf(w, "%s: first BUDGET_EXHAUSTED %.1f s into the measurement, after %d grants acknowledged (%.1f%% of the budget's %d), %d sent\n",
			run, c.FirstExhaustedS, c.AckedBeforeFirstExhausted, c.AckedShare(), c.Grants, c.SentBeforeFirstExhausted)
	} else {
		fmt.Fprintf(w, "%s: the budget was not exhausted within the measurement\n", run)
	}
	for _, r := range slices.Sorted(maps.Keys(c.Refusals)) {
		fmt.Fprintf(w, "%s: grants answered %s: %d\n", run, r, c.Refusals[r])
	}
}

// CampaignRatio is a campaign run's grants a second against the first
// campaign run's (one budget item, as -campaign-shards 1,k orders them).
type CampaignRatio struct {
	Run, Baseline      string
	Shards, BaseShards int
	Ratio              float64
}

// campaignRatios are the ratios of every campaign run after the first
// that drew grants, to that first one.
func campaignRatios(runs []Run) []CampaignRatio {
	var first *Run
	var out []CampaignRatio
	for i := range runs {
		r := &runs[i]
		if r.Campaign == nil || r.Campaign.GrantsPerS == 0 {
			continue
		}
		if first == nil {
			first = r
			continue
		}
		out = append(out, CampaignRatio{Run: r.Name, Baseline: first.Name, Shards: r.Campaign.Shards, BaseShards: first.Campaign.Shards,
			Ratio: r.Campaign.GrantsPerS / first.Campaign.GrantsPerS})
	}
	return out
}

// printCampaignRatios writes campaignRatios.
func printCampaignRatios(w io.Writer, runs []Run) {
	for _, c := range campaignRatios(runs) {
		fmt.Fprintf(w, "%s / %s: %.2f x grants/s (%d shards against %d)\n", c.Run, c.Baseline, c.Ratio, c.Shards, c.BaseShards)
	}
}

// Overspent is how much the budget, as read after the run, granted past
// its total ("0" when it did not; "" when it was not read).
func (c *Campaign) Overspent() string {
	granted, err1 := decimal.NewFromString(c.Granted)
	total, err2 := decimal.NewFromString(c.Total)
	if err1 != nil || err2 != nil {
		return ""
	}
	return decimal.Max(granted.Sub(total), decimal.Zero).String()
}

// AckedShare is the share of the budget's grants acknowledged before the
// first BUDGET_EXHAUSTED, in percent.
func (c *Campaign) AckedShare() float64 {
	if c.Grants <= 0 {
		return 0
	}
	return 100 * float64(c.AckedBeforeFirstExhausted) / float64(c.Grants)
}
