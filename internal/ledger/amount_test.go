package ledger

import (
	"strings"
	"testing"

	"github.com/shopspring/decimal"
)

func TestParseAmount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want string // canonical form; "" means invalid
	}{
		{name: "integer", in: "12", want: "12"},
		{name: "one decimal", in: "12.5", want: "12.5"},
		{name: "two decimals", in: "0.05", want: "0.05"},
		{name: "trailing zero", in: "12.50", want: "12.5"},
		{name: "leading zeros", in: "007", want: "7"},
		{name: "18 integer digits", in: strings.Repeat("9", 18) + ".99", want: strings.Repeat("9", 18) + ".99"},
		{name: "empty", in: ""},
		{name: "zero", in: "0"},
		{name: "zero with fraction", in: "0.00"},
		{name: "negative", in: "-5"},
		{name: "plus sign", in: "+5"},
		{name: "exponent", in: "1e3"},
		{name: "upper exponent", in: "1E3"},
		{name: "NaN", in: "NaN"},
		{name: "Inf", in: "Inf"},
		{name: "infinity", in: "infinity"},
		{name: "three decimals", in: "1.001"},
		{name: "three decimals zero", in: "1.000"},
		{name: "19 integer digits", in: "1" + strings.Repeat("0", 18)},
		{name: "bare point", in: "."},
		{name: "leading point", in: ".5"},
		{name: "trailing point", in: "5."},
		{name: "leading space", in: " 5"},
		{name: "trailing space", in: "5 "},
		{name: "inner space", in: "1 000"},
		{name: "comma", in: "1,5"},
		{name: "hex", in: "0x10"},
		{name: "underscore", in: "1_000"},
		{name: "two points", in: "1.2.3"},
		{name: "fullwidth digit", in: "１"},
		{name: "arabic-indic digit", in: "٥"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseAmount(tt.in, DefaultScale)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("ParseAmount(%q) = %s, want an error", tt.in, got)
				}
				if e, ok := AsError(err); !ok || e.Kind != KindInvalid || e.Reason != ReasonInvalidAmount {
					t.Fatalf("ParseAmount(%q) error = %#v, want KindInvalid/%s", tt.in, err, ReasonInvalidAmount)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseAmount(%q): %v", tt.in, err)
			}
			if got.String() != tt.want {
				t.Fatalf("ParseAmount(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseAmountScale(t *testing.T) {
	t.Parallel()
	if _, err := ParseAmount("1.5", 0); err == nil {
		t.Error("scale 0 accepted a fraction")
	}
	if got, err := ParseAmount("1.12345678", 8); err != nil || got.String() != "1.12345678" {
		t.Errorf("scale 8: got %v, %v", got, err)
	}
}

// FormatAmount is decimal's String, on either side of an int64's bounds and
// with every exponent.
func TestFormatAmountIsDecimalString(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"0", "1", "-1", "42", "100", "10.50", "-0.000001", "1e3", "1.5e2", "0.0",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
	} {
		d := decimal.RequireFromString(s)
		if got, want := FormatAmount(d), d.String(); got != want {
			t.Errorf("FormatAmount(%s) = %q, want %q", s, got, want)
		}
	}
	if got := FormatAmount(decimal.Zero); got != "0" {
		t.Errorf("FormatAmount(decimal.Zero) = %q", got)
	}
}
