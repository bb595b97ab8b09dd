package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// A kinds run's section says, in the summary, the JSON and the page, what
// its purchases drew of each kind, why some were refused, and each check's
// result: a violation shows as one.
func TestKindsSection(t *testing.T) {
	t.Parallel()
	k := &Kinds{Purchases: 42, DrawsByKind: map[string]string{"standard": "40", "lt-campaign": "120"},
		Refusals: map[string]int64{"INSUFFICIENT_BALANCE": 3},
		Checks: []KindCheck{{Name: "no draw of a kind ineligible where its purchase spent", Checked: 60},
			{Name: "GetBalance's kinds = the fold of the entries", Checked: 10, Violations: 2}}}
	r := &Report{Runs: []Run{{Name: "ledgerd", Kinds: k}}}

	var sum bytes.Buffer
	r.PrintSummary(&sum)
	for _, want := range []string{
		"ledgerd: kinds: 42 purchases drew lt-campaign 120, standard 40",
		"ledgerd: kinds: purchases refused, by reason: INSUFFICIENT_BALANCE 3",
		"ledgerd: kinds: no draw of a kind ineligible where its purchase spent (60 checked): ok",
		"ledgerd: kinds: GetBalance's kinds = the fold of the entries (10 checked): 2 violations",
	} {
		if !strings.Contains(sum.String(), want) {
			t.Errorf("summary does not say %q:\n%s", want, sum.String())
		}
	}

	js, err := json.Marshal(r.Runs[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"draws_by_kind":{"lt-campaign":"120","standard":"40"}`, `"refusals":{"INSUFFICIENT_BALANCE":3}`, `"violations":2`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("JSON does not contain %s: %s", want, js)
		}
	}

	page := renderHTML(t, r)
	for _, want := range []string{
		"<h3>Point kinds</h3>",
		"42 purchases drew, by kind: lt-campaign 120, standard 40; purchases refused, by reason: INSUFFICIENT_BALANCE 3",
		"<td>60</td><td>ok</td>",
		`<td>10</td><td class="bad">2 violations</td>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page does not contain %q", want)
		}
	}
	assertSelfContained(t, page)

	// A run without kinds has no such section.
	if page := renderHTML(t, &Report{Runs: []Run{{Name: "ledgerd"}}}); strings.Contains(page, "Point kinds") {
		t.Error("a page without kinds shows a kinds section")
	}
}
