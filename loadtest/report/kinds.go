package report

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// Kinds is what a kinds run's purchases did with the program's point
// kinds: the points they drew of each kind, the purchases refused by
// reason, and the checks of the kinds after the run. Unlike the run's
// other figures they count the whole run, warm-up included: the ledger's
// purchase entries, and every refusal the scenario was answered.
type Kinds struct {
	Purchases   int64             `json:"purchases"`          // purchase entries in the ledger
	DrawsByKind map[string]string `json:"draws_by_kind"`      // points the purchases drew, by kind (refunds not taken off)
	Refusals    map[string]int64  `json:"refusals,omitempty"` // purchases refused, by reason (or code, if none)
	Checks      []KindCheck       `json:"checks"`
}

// A KindCheck is one check of the kinds and what it found.
type KindCheck struct {
	Name       string `json:"name"`
	Checked    int64  `json:"checked"`    // what it looked at: draws, or users' kinds
	Violations int64  `json:"violations"` // each one is in the invariants' violations too
}

// Result is "ok" or how many violations the check found.
func (c KindCheck) Result() string {
	if c.Violations == 0 {
		return "ok"
	}
	return fmt.Sprintf("%d violations", c.Violations)
}

// DrawList is the draws by kind, in kind order: "lt-campaign 120, standard 40".
func (k *Kinds) DrawList() string { return list(k.DrawsByKind) }

// RefusalList is the refusals by reason, in reason order.
func (k *Kinds) RefusalList() string {
	if len(k.Refusals) == 0 {
		return "none"
	}
	var out []string
	for _, r := range slices.Sorted(maps.Keys(k.Refusals)) {
		out = append(out, fmt.Sprintf("%s %d", r, k.Refusals[r]))
	}
	return strings.Join(out, ", ")
}

func list(m map[string]string) string {
	if len(m) == 0 {
		return "none"
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+" "+m[k])
	}
	return strings.Join(out, ", ")
}

// printKinds writes a kinds run's figures.
func printKinds(w io.Writer, run string, k *Kinds) {
	fmt.Fprintf(w, "%s: kinds: %d purchases drew %s\n", run, k.Purchases, k.DrawList())
	fmt.Fprintf(w, "%s: kinds: purchases refused, by reason: %s\n", run, k.RefusalList())
	for _, c := range k.Checks {
		fmt.Fprintf(w, "%s: kinds: %s (%d checked): %s\n", run, c.Name, c.Checked, c.Result())
	}
}
