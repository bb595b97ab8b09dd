package report

import (
	"fmt"
	"strings"
	"testing"
)

// The exit status needs every run of ledgerd to have written: a closed loop
// that wrote does not cover an open loop that did not, and reads are no
// writes.
func TestEveryRunOfLedgerdMustWrite(t *testing.T) {
	for _, c := range []struct {
		runs []Run
		want bool
	}{
		{[]Run{{Name: "ledgerd", Mutations: 5}, {Name: "ledgerd-open", Mutations: 3}, {Name: "baseline-direct"}}, true},
		{[]Run{{Name: "ledgerd", Mutations: 5}, {Name: "ledgerd-open", OK: 40}}, false},
		{[]Run{{Name: "ledgerd", OK: 9}}, false},
		{[]Run{{Name: "baseline-direct", Mutations: 9}}, false},
	} {
		if got := EveryRunWrote(c.runs); got != c.want {
			t.Errorf("everyRunWrote(%+v) = %v, want %v", c.runs, got, c.want)
		}
	}
}

// With -compare, ledgerd's first closed loop is compared with each baseline,
// and each later closed loop (more instances) with it; open loops are not.
func TestComparisonsTakeTheFirstClosedLoopOfLedgerdAsReference(t *testing.T) {
	t.Parallel()
	rep := Report{Runs: []Run{
		{Name: "baseline-direct", Mode: "closed", Purchases: 100},
		{Name: "ledgerd", Mode: "closed", Purchases: 50},
		{Name: "ledgerd-open", Mode: "open", Purchases: 25},
		{Name: "ledgerd-x3", Mode: "closed", Purchases: 20},
		{Name: "ledgerd-x3-affinity", Mode: "closed", Purchases: 45},
	}}
	var got []string
	for _, c := range rep.Comparisons() {
		got = append(got, fmt.Sprintf("%s/%s=%.2f", c.Run, c.Baseline, c.Ratio))
	}
	if s := strings.Join(got, " "); s != "ledgerd/baseline-direct=0.50 ledgerd-x3/ledgerd=0.40 ledgerd-x3-affinity/ledgerd=0.90" {
		t.Errorf("comparisons = %s", s)
	}
}
