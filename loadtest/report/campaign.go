package report

import (
	"fmt"
	"io"
	"maps"
	"slices"
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
			run, c.FirstExhaustedS, c.AckedBeforeFirstExhausted, 100*float64(c.AckedBeforeFirstExhausted)/float64(c.Grants), c.Grants, c.SentBeforeFirstExhausted)
	} else {
		fmt.Fprintf(w, "%s: the budget was not exhausted within the measurement\n", run)
	}
	for _, r := range slices.Sorted(maps.Keys(c.Refusals)) {
		fmt.Fprintf(w, "%s: grants answered %s: %d\n", run, r, c.Refusals[r])
	}
}

// printCampaignRatios writes each campaign run's grants a second against
// the first campaign run's (one budget item, as -campaign-shards 1,k
// orders them).
func printCampaignRatios(w io.Writer, runs []Run) {
	var first *Run
	for i := range runs {
		r := &runs[i]
		if r.Campaign == nil || r.Campaign.GrantsPerS == 0 {
			continue
		}
		if first == nil {
			first = r
			continue
		}
		fmt.Fprintf(w, "%s / %s: %.2f x grants/s (%d shards against %d)\n", r.Name, first.Name,
			r.Campaign.GrantsPerS/first.Campaign.GrantsPerS, r.Campaign.Shards, first.Campaign.Shards)
	}
}
