package ledger

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/shopspring/decimal"
)

// hashAsRecorded is Mutation.Hash as it was written before it gathered its
// fields in a buffer (issue 37): request records keep these hashes, so a
// retry of a request recorded before must hash the same.
func hashAsRecorded(m Mutation) string {
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field(string(m.Type))
	field(m.UserID)
	field(m.RequestID)
	field(m.Amount.String())
	field(m.OrderID)
	field(m.PurchaseRequestID)
	if m.HoldRequestID != "" {
		field("hold")
		field(m.HoldRequestID)
	}
	if m.ExpireSpec != "" {
		field("expire")
		field(m.ExpireSpec)
	}
	if m.EffectiveSpec != "" {
		field("effective")
		field(m.EffectiveSpec)
	}
	if m.Type == EntryReversal {
		field("grant")
		field(m.GrantRequestID)
		field(m.Reason)
	}
	if m.BudgetID != "" {
		field("budget")
		field(m.BudgetID)
	}
	if m.Kind != "" {
		field("kind")
		field(m.Kind)
	}
	if m.MerchantID != "" || m.Category != "" {
		field("where")
		field(m.MerchantID)
		field(m.Category)
	}
	if m.Type == EntryAdjustment {
		field(fmt.Sprint(m.Debit, m.ExplainBalance))
		field(m.Reason)
		field(m.ExpectedBalance.String())
	}
	keys := make([]string, 0, len(m.Metadata))
	for k := range m.Metadata {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		field(k)
		field(m.Metadata[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Every kind of mutation hashes as its request record says, past the
// buffer's 512 bytes too; and one hash is pinned, as recorded.
func TestHashAsRecorded(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 600)
	for _, m := range []Mutation{
		{Type: EntryPurchase, UserID: "u1", RequestID: "p-1", Amount: decimal.NewFromInt(1), OrderID: "o"},
		{Type: EntryGrant, UserID: "u1", RequestID: "g-1", Amount: decimal.RequireFromString("12.50"), ExpireSpec: "P30D", EffectiveSpec: "P1D", Kind: "gold", BudgetID: "b"},
		{Type: EntryRefund, UserID: "u1", RequestID: "r-1", Amount: decimal.RequireFromString("0.05"), PurchaseRequestID: "p-1"},
		{Type: EntryHold, UserID: "u1", RequestID: "h-1", Amount: decimal.NewFromInt(99999999999), MerchantID: "m", Category: "c"},
		{Type: EntryCapture, UserID: "u1", RequestID: "c-1", HoldRequestID: "h-1"},
		{Type: EntryReversal, UserID: "u1", RequestID: "v-1", Amount: decimal.NewFromInt(3), GrantRequestID: "g-1", Reason: "fraud"},
		{Type: EntryAdjustment, UserID: "u1", RequestID: "a-1", Amount: decimal.NewFromInt(3), Debit: true, ExplainBalance: true, Reason: "r", ExpectedBalance: decimal.RequireFromString("-7.5")},
		{Type: EntryPurchase, UserID: "u1", RequestID: "p-2", Amount: decimal.NewFromInt(2), Metadata: map[string]string{"b": "2", "a": "1", "c": long}},
		{Type: EntryPurchase, UserID: long, RequestID: long, Amount: decimal.RequireFromString("123456789012345678901234567890")},
	} {
		if got, want := m.Hash(), hashAsRecorded(m); got != want {
			t.Errorf("%s %s: hash %s, recorded %s", m.Type, m.RequestID[:min(len(m.RequestID), 8)], got, want)
		}
	}
	pinned := Mutation{Type: EntryPurchase, UserID: "alice", RequestID: "req-1", Amount: decimal.NewFromInt(10), OrderID: "order 42", Metadata: map[string]string{"shop": "berlin"}}
	if got, want := pinned.Hash(), "51921a9b628ed3099014134eb6c63c1d89c4c4edb827c2d96d611716eb29b525"; got != want {
		t.Errorf("hash %s, recorded %s", got, want)
	}
}
