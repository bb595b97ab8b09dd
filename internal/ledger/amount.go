package ledger

import (
	"math"
	"strconv"
	"strings"

	"github.com/shopspring/decimal"
)

const (
	// DefaultScale is how many digits after the point an amount may have.
	DefaultScale = 2
	// MaxIntegerDigits bounds amounts to 18 digits before the point, which keeps
	// balances and sums far below DynamoDB's 38 significant digits.
	MaxIntegerDigits = 18
)

var minInt64, maxInt64 = decimal.NewFromInt(math.MinInt64), decimal.NewFromInt(math.MaxInt64)

// FormatAmount is d.String(): by strconv when d is an integer of exponent
// 0 that fits an int64 (every amount of a ledger whose points are whole),
// which math/big formats with two allocations and a division a digit
// (issue 37; ddbattr.DecimalString is the same for attribute values).
func FormatAmount(d decimal.Decimal) string {
	if d.Exponent() == 0 && d.Cmp(minInt64) >= 0 && d.Cmp(maxInt64) <= 0 {
		return strconv.FormatInt(d.CoefficientInt64(), 10)
	}
	return d.String()
}

// ParseAmount parses a positive decimal amount written as digits, optionally
// followed by a point and at most scale digits ("12", "12.5", "0.05"). It
// rejects signs, exponents, spaces, NaN and Inf, zero, a bare point, and more
// than MaxIntegerDigits digits before the point. Leading zeros are allowed.
func ParseAmount(s string, scale int32) (decimal.Decimal, error) {
	d, err := parseDigits("amount", s, scale)
	if err == nil && !d.IsPositive() {
		err = Errorf(KindInvalid, ReasonInvalidAmount, "amount %q: must be greater than zero", truncate(s, 40))
	}
	return d, err
}

// ParseBalance parses a balance as ParseAmount parses an amount, but zero is
// a balance too.
func ParseBalance(s string, scale int32) (decimal.Decimal, error) {
	return parseDigits("balance", s, scale)
}

func parseDigits(what, s string, scale int32) (decimal.Decimal, error) {
	fail := func(why string) (decimal.Decimal, error) {
		return decimal.Decimal{}, Errorf(KindInvalid, ReasonInvalidAmount, "%s %q: %s", what, truncate(s, 40), why)
	}
	if s == "" {
		return fail("is empty")
	}
	intPart, fracPart, hasPoint := strings.Cut(s, ".")
	if intPart == "" || (hasPoint && fracPart == "") {
		return fail("must be digits with an optional fraction, like 12 or 12.5")
	}
	if !allDigits(intPart) || !allDigits(fracPart) {
		return fail("must be digits with an optional fraction, like 12 or 12.5 (no sign, exponent or spaces)")
	}
	if len(fracPart) > int(scale) {
		return fail("has more than " + itoa(int(scale)) + " digits after the point")
	}
	if len(strings.TrimLeft(intPart, "0")) > MaxIntegerDigits {
		return fail("has more than " + itoa(MaxIntegerDigits) + " digits before the point")
	}
	d, err := decimal.NewFromString(s)
	if err != nil {
		return fail("is not a decimal number")
	}
	return d, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func itoa(n int) string { return decimal.NewFromInt(int64(n)).String() }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
