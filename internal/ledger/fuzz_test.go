package ledger

import (
	"strings"
	"testing"

	"github.com/shopspring/decimal"
)

// The fuzz targets run as ordinary tests over their seeds in `go test`, and
// search for more with `make fuzz` (go test -fuzz).

// maxScale is the largest amount scale ledgerd accepts (-amount-scale).
const maxScale = 8

// amountSeeds are the boundaries of an amount: zero, signs, the scale, the
// largest amount and just above it, exponents, specials, spaces, other
// number syntaxes and digits of other scripts.
var amountSeeds = []string{
	"", "0", "0.0", "00", "-1", "+1", "1", "01", "0.01", "0.001", "1.", ".1", ".",
	"999999999999999999.99", "999999999999999999.999", "1000000000000000000",
	"000000000000000000000000001", "1e3", "1E3", "1e-2", "NaN", "nan", "Inf", "-Inf",
	"Infinity", " 1", "1 ", "1\n", "\t1", "1 000", "1,5", "0x10", "0b1", "0o7", "1_000",
	"1.2.3", "１", "٥", "1\u200d", "\u202e1", "1\x00", "\xff", strings.Repeat("9", 1000),
	"0." + strings.Repeat("0", 1000) + "1",
}

func FuzzParseAmount(f *testing.F) {
	for _, s := range amountSeeds {
		for _, scale := range []uint8{0, DefaultScale, maxScale} {
			f.Add(s, scale)
		}
	}
	maxAmount := func(scale int32) decimal.Decimal {
		// 18 nines, then scale nines after the point.
		return decimal.New(1, MaxIntegerDigits).Sub(decimal.New(1, -scale))
	}
	f.Fuzz(func(t *testing.T, s string, scaleByte uint8) {
		scale := int32(scaleByte % (maxScale + 1))
		d, err := ParseAmount(s, scale)
		if err != nil {
			e, ok := AsError(err)
			if !ok || e.Kind != KindInvalid || e.Reason != ReasonInvalidAmount {
				t.Fatalf("ParseAmount(%q, %d) error = %#v, want KindInvalid/%s", s, scale, err, ReasonInvalidAmount)
			}
			return
		}
		if !d.IsPositive() {
			t.Fatalf("ParseAmount(%q, %d) = %s, not positive", s, scale, d)
		}
		if !d.Equal(d.Truncate(scale)) {
			t.Fatalf("ParseAmount(%q, %d) = %s, more than %d digits after the point", s, scale, d, scale)
		}
		if d.GreaterThan(maxAmount(scale)) {
			t.Fatalf("ParseAmount(%q, %d) = %s, above the maximum %s", s, scale, d, maxAmount(scale))
		}
		for i := 0; i < len(s); i++ {
			if c := s[i]; (c < '0' || c > '9') && c != '.' {
				t.Fatalf("ParseAmount(%q, %d) accepted byte %q", s, scale, c)
			}
		}
		again, err := ParseAmount(d.String(), scale)
		if err != nil {
			t.Fatalf("ParseAmount(%q, %d) = %s, which does not parse again: %v", s, scale, d, err)
		}
		if !again.Equal(d) || again.String() != d.String() {
			t.Fatalf("ParseAmount(%q, %d) = %s, parsed again %s", s, scale, d, again)
		}
	})
}

func FuzzNewMutation(f *testing.F) {
	ids := []string{
		"alice", "", "a", "#", "ACCT#x", "A", "E#00000000000000000001", "R#req", "a\nb", "a\tb", "a b",
		"a\x00b", "\u202eecila", "al\u200dice", "аlice", "ａlice", "a.b_c:d@e+f-g",
		strings.Repeat("a", MaxIDLength), strings.Repeat("a", MaxIDLength+1), "\xff\xfe", "é",
	}
	types := []EntryType{EntryGrant, EntryPurchase, EntryRefund, EntryAdjustment, "BOGUS"}
	for i, id := range ids {
		amount := amountSeeds[i%len(amountSeeds)]
		typ := uint8(i % len(types))
		f.Add(typ, id, "req-1", amount, "order 42", "purchase-1", "shop", "berlin", "")
		f.Add(typ, "alice", id, "10", "", "", "", "", "")
		f.Add(uint8(2), "alice", "refund-1", "1", id, id, "", "", "")
		f.Add(uint8(0), "alice", "req-1", "1", "", "", id, id, "")
	}
	f.Add(uint8(3), "alice", "adj-1", "5", "", "", "", "", "a mistake")
	f.Add(uint8(3), "alice", "adj-1", "5", "", "", "", "", " ")
	f.Fuzz(func(t *testing.T, typ uint8, user, requestID, amount, orderID, purchaseID, mdKey, mdValue, reason string) {
		r := Request{
			UserID: user, RequestID: requestID, Amount: amount, OrderID: orderID,
			PurchaseRequestID: purchaseID, Reason: reason,
		}
		if mdKey != "" || mdValue != "" {
			r.Metadata = map[string]string{mdKey: mdValue}
		}
		et := types[int(typ)%len(types)]
		m, err := NewMutation(et, r, DefaultScale)
		if err != nil {
			if e, ok := AsError(err); !ok || e.Kind != KindInvalid || e.Reason == "" {
				t.Fatalf("NewMutation(%s, %+v) error = %#v, want KindInvalid with a reason", et, r, err)
			}
			if m.UserID != "" || m.RequestID != "" {
				t.Fatalf("NewMutation(%s, %+v) failed but returned %+v", et, r, m)
			}
			return
		}
		if et == "BOGUS" {
			t.Fatalf("NewMutation accepted entry type %q", et)
		}
		keyIDs := map[string]string{"user_id": m.UserID, "request_id": m.RequestID}
		if et == EntryRefund {
			keyIDs["purchase_request_id"] = m.PurchaseRequestID
		} else if m.PurchaseRequestID != "" {
			t.Fatalf("a %s names purchase %q", et, m.PurchaseRequestID)
		}
		for k := range m.Metadata {
			keyIDs["metadata key"] = k
		}
		for field, id := range keyIDs {
			if id == "" || len(id) > MaxIDLength {
				t.Fatalf("accepted %s %q: %d bytes, want 1 to %d", field, id, len(id), MaxIDLength)
			}
			for i := 0; i < len(id); i++ {
				if strings.IndexByte(idAlphabet, id[i]) < 0 {
					t.Fatalf("accepted %s %q with byte %q outside the id alphabet", field, id, id[i])
				}
			}
			if err := ValidateUserID(id); err != nil {
				t.Fatalf("accepted %s %q, which ValidateUserID refuses: %v", field, id, err)
			}
		}
		if !m.Amount.IsPositive() {
			t.Fatalf("accepted amount %q as %s", amount, m.Amount)
		}
		if len(m.OrderID) > MaxOrderIDBytes || strings.ContainsAny(m.OrderID, "\x00\n\r\t\u202e\u200d") {
			t.Fatalf("accepted order_id %q", m.OrderID)
		}
		if m.UserID != user || m.RequestID != requestID || m.OrderID != orderID {
			t.Fatalf("the mutation %+v is not the request %+v", m, r)
		}
		if again, _ := NewMutation(et, r, DefaultScale); again.Hash() != m.Hash() {
			t.Fatal("the same request hashes differently")
		}
	})
}

// idAlphabet spells out, apart from isIDByte, what an id may hold: a change
// to either shows here.
const idAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:@+-"

func FuzzValidateUserID(f *testing.F) {
	for _, id := range []string{
		"alice", "", "#", "ACCT#x", "A", "E#00000000000000000001", "a\nb", "a\tb", "a b", "a\x00b",
		"\u202eecila", "аlice", "ａlice", strings.Repeat("a", MaxIDLength), strings.Repeat("a", MaxIDLength+1),
		"\xff", "a.b_c:d@e+f-g",
	} {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := ValidateUserID(id)
		valid := id != "" && len(id) <= MaxIDLength
		for i := 0; i < len(id); i++ {
			valid = valid && strings.IndexByte(idAlphabet, id[i]) >= 0
		}
		switch {
		case valid && err != nil:
			t.Fatalf("ValidateUserID(%q) = %v, want it accepted", id, err)
		case !valid && err == nil:
			t.Fatalf("ValidateUserID(%q) accepted it", id)
		case err != nil:
			if e, ok := AsError(err); !ok || e.Kind != KindInvalid || e.Reason != ReasonInvalidUserID {
				t.Fatalf("ValidateUserID(%q) error = %#v, want KindInvalid/%s", id, err, ReasonInvalidUserID)
			}
		}
	})
}
