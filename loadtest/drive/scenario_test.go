package drive

import (
	"math/rand/v2"
	"testing"
)

func TestParseMix(t *testing.T) {
	mix, err := ParseMix("purchase=60, grant=5,refund=10,balance=15,history=10")
	if err != nil || mix["purchase"] != 60 || mix["history"] != 10 || len(mix) != 5 {
		t.Errorf("parseMix = %v, %v", mix, err)
	}
	for _, bad := range []string{"", "purchase", "purchase=-1", "transfer=5", "purchase=0,grant=0", "purchase=x"} {
		if _, err := ParseMix(bad); err == nil {
			t.Errorf("parseMix(%q) accepted", bad)
		}
	}
}

func TestZipfFavoursTheFirstUsers(t *testing.T) {
	pick := pickZipf(1000)
	rng := rand.New(rand.NewPCG(1, 2))
	counts := make([]int, 1000)
	for range 100000 {
		counts[pick(rng)]++
	}
	// With exponent 1, user 0 takes 1/H(1000) ~ 13% and user 1 half of it.
	if counts[0] < 11000 || counts[0] > 15000 || counts[1] < counts[0]/3 || counts[1] > counts[0]*2/3 {
		t.Errorf("user 0 picked %d times, user 1 %d, of 100000", counts[0], counts[1])
	}
}
