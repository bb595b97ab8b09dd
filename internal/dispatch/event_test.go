package dispatch_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/ledger"
)

// An event's body is its entry as written, whatever was refunded of the
// purchase or reversed of the grant since: one webhook-id, one body, at
// every attempt and redelivery.
func TestAnEventIsItsEntryAsWritten(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		entry ledger.Entry
		field string
		want  string
	}{
		{"a purchase refunded since", ledger.Entry{ID: "01J0000000000000000000000P", UserID: "alice", Version: 3, Type: ledger.EntryPurchase,
			Amount: decimal.NewFromInt(-10), RefundedAmount: decimal.NewFromInt(4), CreateTime: at}, "refunded_amount", "0"},
		{"a grant reversed since", ledger.Entry{ID: "01J0000000000000000000000G", UserID: "alice", Version: 1, Type: ledger.EntryGrant,
			Amount: decimal.NewFromInt(10), ReversedAmount: decimal.NewFromInt(3), CreateTime: at}, "reversed_amount", "0"},
	} {
		ev, err := dispatch.EntryEvent(api.EntryJSON, tc.entry)
		if err != nil {
			t.Fatal(err)
		}
		var data struct {
			Entry map[string]any `json:"entry"`
		}
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			t.Fatal(err)
		}
		if got := data.Entry[tc.field]; got != tc.want {
			t.Errorf("%s: the event's %s = %v, want %s (as written)", tc.name, tc.field, got, tc.want)
		}
	}
}
