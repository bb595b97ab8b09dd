package ledger

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

func validRequest() Request {
	return Request{UserID: "alice", RequestID: "req-1", Amount: "10", OrderID: "order 42", Metadata: map[string]string{"shop": "berlin"}}
}

func TestNewMutationRejects(t *testing.T) {
	t.Parallel()
	bigMetadata := map[string]string{}
	for i := range MaxMetadataKeys + 1 {
		bigMetadata[fmt.Sprint("k", i)] = "v"
	}
	tests := []struct {
		name   string
		typ    EntryType
		edit   func(*Request)
		reason string
	}{
		{"empty user", EntryPurchase, func(r *Request) { r.UserID = "" }, ReasonInvalidUserID},
		{"user with key separator", EntryPurchase, func(r *Request) { r.UserID = "alice#E#1" }, ReasonInvalidUserID},
		{"user with space", EntryPurchase, func(r *Request) { r.UserID = "al ice" }, ReasonInvalidUserID},
		{"user with control char", EntryPurchase, func(r *Request) { r.UserID = "al\x00ice" }, ReasonInvalidUserID},
		{"user with unicode", EntryPurchase, func(r *Request) { r.UserID = "аlice" }, ReasonInvalidUserID}, // Cyrillic a
		{"user too long", EntryPurchase, func(r *Request) { r.UserID = strings.Repeat("a", MaxIDLength+1) }, ReasonInvalidUserID},
		{"empty request id", EntryPurchase, func(r *Request) { r.RequestID = "" }, ReasonInvalidRequestID},
		{"request id with separator", EntryPurchase, func(r *Request) { r.RequestID = "x#y" }, ReasonInvalidRequestID},
		{"request id too long", EntryGrant, func(r *Request) { r.RequestID = strings.Repeat("r", MaxIDLength+1) }, ReasonInvalidRequestID},
		{"negative amount", EntryGrant, func(r *Request) { r.Amount = "-1" }, ReasonInvalidAmount},
		{"zero amount", EntryGrant, func(r *Request) { r.Amount = "0" }, ReasonInvalidAmount},
		{"NaN amount", EntryPurchase, func(r *Request) { r.Amount = "NaN" }, ReasonInvalidAmount},
		{"order id too long", EntryPurchase, func(r *Request) { r.OrderID = strings.Repeat("o", MaxOrderIDBytes+1) }, ReasonInvalidOrderID},
		{"order id with newline", EntryPurchase, func(r *Request) { r.OrderID = "a\nb" }, ReasonInvalidOrderID},
		{"order id invalid utf8", EntryPurchase, func(r *Request) { r.OrderID = "\xff" }, ReasonInvalidOrderID},
		{"too many metadata keys", EntryPurchase, func(r *Request) { r.Metadata = bigMetadata }, ReasonInvalidMetadata},
		{"metadata value too long", EntryPurchase, func(r *Request) { r.Metadata = map[string]string{"k": strings.Repeat("v", MaxMetadataValue+1)} }, ReasonInvalidMetadata},
		{"metadata empty key", EntryPurchase, func(r *Request) { r.Metadata = map[string]string{"": "v"} }, ReasonInvalidMetadata},
		{"metadata key with space", EntryPurchase, func(r *Request) { r.Metadata = map[string]string{"a b": "v"} }, ReasonInvalidMetadata},
		{"metadata too large in all", EntryPurchase, func(r *Request) {
			r.Metadata = map[string]string{}
			for i := range 10 {
				r.Metadata[fmt.Sprint("key", i)] = strings.Repeat("v", 250)
			}
		}, ReasonInvalidMetadata},
		{"refund without purchase", EntryRefund, func(r *Request) {}, ReasonInvalidRequestID},
		{"purchase naming a purchase", EntryPurchase, func(r *Request) { r.PurchaseRequestID = "p" }, ReasonInvalidRequestID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := validRequest()
			tt.edit(&r)
			_, err := NewMutation(tt.typ, r, DefaultScale)
			e, ok := AsError(err)
			if !ok || e.Kind != KindInvalid || e.Reason != tt.reason {
				t.Fatalf("NewMutation error = %v, want KindInvalid/%s", err, tt.reason)
			}
		})
	}
}

func TestMutationDeltaAndHash(t *testing.T) {
	t.Parallel()
	p, err := NewMutation(EntryPurchase, validRequest(), DefaultScale)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Delta().Equal(decimal.NewFromInt(-10)) {
		t.Errorf("purchase delta = %s, want -10", p.Delta())
	}
	g, _ := NewMutation(EntryGrant, validRequest(), DefaultScale)
	if !g.Delta().Equal(decimal.NewFromInt(10)) {
		t.Errorf("grant delta = %s, want 10", g.Delta())
	}

	same := validRequest()
	same.Amount = "10.00" // the same amount, written differently
	p2, _ := NewMutation(EntryPurchase, same, DefaultScale)
	if p.Hash() != p2.Hash() {
		t.Error("the same purchase hashes differently")
	}
	for name, edit := range map[string]func(*Request){
		"amount":   func(r *Request) { r.Amount = "11" },
		"order":    func(r *Request) { r.OrderID = "order 43" },
		"metadata": func(r *Request) { r.Metadata = map[string]string{"shop": "bonn"} },
		"no meta":  func(r *Request) { r.Metadata = nil },
		// Field boundaries must not blur: "order 4" + "2shop" != "order 42" + "shop".
		"boundary": func(r *Request) { r.OrderID = "order 4"; r.Metadata = map[string]string{"2shop": "berlin"} },
	} {
		r := validRequest()
		edit(&r)
		other, err := NewMutation(EntryPurchase, r, DefaultScale)
		if err != nil {
			t.Fatal(err)
		}
		if other.Hash() == p.Hash() {
			t.Errorf("changing %s did not change the hash", name)
		}
	}
	if g.Hash() == p.Hash() {
		t.Error("a grant and a purchase with the same fields hash alike")
	}
}

func TestCheckExplains(t *testing.T) {
	t.Parallel()
	d := decimal.RequireFromString
	tests := []struct {
		name          string
		amount        string
		debit         bool
		balance, fold string
		reason        string // "" = accepted
	}{
		{"the difference", "7", false, "107", "100", ""},
		{"a debit for a balance below its entries", "7", true, "93", "100", ""},
		{"nothing to explain", "5", false, "100", "100", ReasonNothingToExplain},
		{"too little", "5", false, "107", "100", ReasonNotTheDifference},
		{"too much", "8", false, "107", "100", ReasonNotTheDifference},
		{"the wrong way", "7", true, "107", "100", ReasonNotTheDifference},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, err := NewMutation(EntryAdjustment, Request{UserID: "u", RequestID: "a", Amount: tc.amount, Debit: tc.debit,
				Reason: "r", ExplainBalance: true, ExpectedBalance: tc.balance}, DefaultScale)
			if err != nil {
				t.Fatal(err)
			}
			err = CheckExplains(m, Account{UserID: "u", Balance: d(tc.balance), Version: 3}, d(tc.fold))
			if got := ReasonOf(err); got != tc.reason || (tc.reason == "") != (err == nil) {
				t.Errorf("CheckExplains = %v, want reason %q", err, tc.reason)
			}
		})
	}
}

// A mutation keeps its times to the microsecond, as the stores keep them:
// a write path that cached a bucket expiring at a nanosecond its store
// cannot keep made one bucket two once a refund's draws came back from the
// store (and the DynamoDB store's index of next expiries a delete and a put
// of one key, which DynamoDB refuses).
func TestNewMutationKeepsTimesToTheMicrosecond(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 24, 10, 0, 0, 123456789, time.FixedZone("CET", 3600))
	r := validRequest()
	r.Effective, r.Expire = at, at.Add(time.Hour)
	g, err := NewMutation(EntryGrant, r, DefaultScale)
	if err != nil {
		t.Fatal(err)
	}
	if want := at.UTC().Truncate(time.Microsecond); !g.Effective.Equal(want) || !g.Expire.Equal(want.Add(time.Hour)) || g.Expire.Location() != time.UTC {
		t.Errorf("effective %s, expire %s; want %s and an hour later, in UTC", g.Effective.Format(time.RFC3339Nano), g.Expire.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano))
	}
	r.Expire = at.Add(time.Nanosecond) // after the effective time, but not by a microsecond the store keeps
	if _, err := NewMutation(EntryGrant, r, DefaultScale); ReasonOf(err) != ReasonInvalidExpiry {
		t.Errorf("expiry 1ns after the effective time: %v, want %s", err, ReasonInvalidExpiry)
	}
}
