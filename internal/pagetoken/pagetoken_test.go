package pagetoken_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/pointledger/pointledger/internal/ledger"
	"github.com/pointledger/pointledger/internal/pagetoken"
)

// newCodec returns a codec with a key made of b repeated.
func newCodec(tb testing.TB, b byte) *pagetoken.Codec {
	tb.Helper()
	c, err := pagetoken.New(bytes.Repeat([]byte{b}, pagetoken.MinKeySize))
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	c := newCodec(t, 1)
	tests := []struct {
		name    string
		version int64
		scope   []string
	}{
		{name: "first page", version: 0, scope: []string{"ListEntries", "alice"}},
		{name: "a version", version: 42, scope: []string{"ListHistory", "alice", "0123456789abcdef"}},
		{name: "the largest version", version: math.MaxInt64, scope: []string{"ListEntries", "alice"}},
		{name: "negative", version: -5, scope: []string{"ListEntries", "alice"}},
		{name: "no scope", version: 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			token := c.Encode(tt.version, tt.scope...)
			if !strings.HasPrefix(token, "v1.") || strings.ContainsAny(token, "+/=") {
				t.Errorf("token %q: want v1. and unpadded base64url", token)
			}
			got, err := c.Decode(token, tt.scope...)
			if err != nil || got != tt.version {
				t.Errorf("Decode(Encode(%d)) = %d, %v", tt.version, got, err)
			}
		})
	}
}

func TestRefused(t *testing.T) {
	t.Parallel()
	c := newCodec(t, 1)
	scope := []string{"ListEntries", "alice"}
	token := c.Encode(2, scope...)
	blob, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(token, "v1."))
	if err != nil {
		t.Fatal(err)
	}
	// altered flips one bit of byte i of the token's position and MAC.
	altered := func(i int) string {
		b := bytes.Clone(blob)
		b[i] ^= 1
		return "v1." + base64.RawURLEncoding.EncodeToString(b)
	}
	tests := []struct {
		name  string
		token string
		scope []string // nil: scope
	}{
		{name: "one byte of the position changed", token: altered(7)},
		{name: "the position's first byte changed", token: altered(0)},
		{name: "one byte of the MAC changed", token: altered(len(blob) - 1)},
		{name: "another key", token: newCodec(t, 2).Encode(2, scope...)},
		{name: "a derived key", token: pagetoken.Derived("ledger").Encode(2, scope...)},
		{name: "no version prefix", token: strings.TrimPrefix(token, "v1.")},
		{name: "another version prefix", token: "v2." + strings.TrimPrefix(token, "v1.")},
		{name: "an unversioned token of the old format", token: base64.RawURLEncoding.EncodeToString([]byte(`{"u":"alice","v":2}`))},
		{name: "another user", token: token, scope: []string{"ListEntries", "bob"}},
		{name: "another read", token: token, scope: []string{"ListHistory", "alice"}},
		{name: "other filters", token: token, scope: []string{"ListEntries", "alice", "f"}},
		{name: "the scope split otherwise", token: c.Encode(2, "ListEntriesa", "lice"), scope: scope},
		{name: "padded", token: token + "="},
		{name: "truncated", token: token[:len(token)-1]},
		{name: "longer", token: "v1." + base64.RawURLEncoding.EncodeToString(append(bytes.Clone(blob), 0))},
		{name: "not base64url", token: "v1." + strings.Repeat("%", len(token)-3)},
		{name: "the prefix alone", token: "v1."},
		{name: "empty", token: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := tt.scope
			if s == nil {
				s = scope
			}
			v, err := c.Decode(tt.token, s...)
			if e, ok := ledger.AsError(err); !ok || e.Kind != ledger.KindInvalid || e.Reason != ledger.ReasonInvalidPageToken {
				t.Errorf("Decode(%q) = %d, %v; want %s", tt.token, v, err, ledger.ReasonInvalidPageToken)
			}
		})
	}
}

func TestNewRefusesAShortKey(t *testing.T) {
	t.Parallel()
	if _, err := pagetoken.New(make([]byte, pagetoken.MinKeySize-1)); err == nil {
		t.Error("New took a key shorter than MinKeySize")
	}
}

// A derived key is the same on every instance and after a restart, and
// differs between deployments.
func TestDerived(t *testing.T) {
	t.Parallel()
	token := pagetoken.Derived("prod-ledger").Encode(3, "ListEntries", "alice")
	if v, err := pagetoken.Derived("prod-ledger").Decode(token, "ListEntries", "alice"); err != nil || v != 3 {
		t.Errorf("another codec derived from the same names: %d, %v", v, err)
	}
	if _, err := pagetoken.Derived("test-ledger").Decode(token, "ListEntries", "alice"); err == nil {
		t.Error("a codec derived from other names took the token")
	}
}

func ExampleCodec() {
	key := bytes.Repeat([]byte{7}, pagetoken.MinKeySize) // in production: LEDGER_PAGE_TOKEN_KEY
	c, _ := pagetoken.New(key)
	token := c.Encode(50, "ListEntries", "alice")
	after, err := c.Decode(token, "ListEntries", "alice")
	fmt.Println(after, err)
	_, err = c.Decode(token, "ListEntries", "bob")
	fmt.Println(ledger.ReasonOf(err))
	// Output:
	// 50 <nil>
	// INVALID_PAGE_TOKEN
}
