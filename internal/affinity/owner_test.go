package affinity

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// Pinned: every instance, of every version, on every machine must name the
// same owner, so the weights may never change.
func TestOwnerIsStable(t *testing.T) {
	t.Parallel()
	peers := []string{"http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.3:8080"}
	want := map[string]string{}
	for _, user := range []string{"alice", "bob", "carol", "dave", "u0", "u1", "u2", "u3"} {
		want[user] = Owner(user, peers)
		for _, order := range [][]string{{peers[2], peers[0], peers[1]}, {peers[1], peers[2], peers[0]}} {
			if got := Owner(user, order); got != want[user] {
				t.Errorf("Owner(%q) over %v = %s, over %v = %s", user, peers, want[user], order, got)
			}
		}
	}
	if got := weight("http://10.0.0.1:8080", "alice"); got != 0x8849112a1d3cccd9 {
		t.Errorf("weight of alice on 10.0.0.1 = %#x: the hash changed, and instances of two versions would disagree", got)
	}
	if Owner("alice", nil) != "" {
		t.Error("an owner among no peers")
	}
	if Owner("alice", peers[:1]) != peers[0] {
		t.Error("one peer does not own everyone")
	}
}

// users is n user ids as a ledger names them.
func users(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint("user-", i)
	}
	return out
}

func TestOwnerBalances(t *testing.T) {
	t.Parallel()
	for _, peers := range [][]string{
		{"http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.3:8080"},
		{"http://ledgerd-0.ledgerd:8080", "http://ledgerd-1.ledgerd:8080", "http://ledgerd-2.ledgerd:8080", "http://ledgerd-3.ledgerd:8080", "http://ledgerd-4.ledgerd:8080"},
		{"http://127.0.0.1:40001", "http://127.0.0.1:40002"},
	} {
		const n = 30000
		owned := map[string]int{}
		for _, u := range users(n) {
			owned[Owner(u, peers)]++
		}
		// Each count is binomial: 5 standard deviations is a bound no fair
		// hash passes by chance.
		share := float64(n) / float64(len(peers))
		slack := 5 * math.Sqrt(share*(1-1/float64(len(peers))))
		for _, p := range peers {
			if math.Abs(float64(owned[p])-share) > slack {
				t.Errorf("over %d peers, %s owns %d of %d users, want %.0f ± %.0f", len(peers), p, owned[p], n, share, slack)
			}
		}
	}
}

// A peer that leaves gives away its users only, to every other peer; one
// that joins takes users only, from every other peer.
func TestOwnerMovesLittle(t *testing.T) {
	t.Parallel()
	peers := []string{"http://10.0.0.1:8080", "http://10.0.0.2:8080", "http://10.0.0.3:8080", "http://10.0.0.4:8080"}
	gone := peers[1]
	left := slices.DeleteFunc(slices.Clone(peers), func(p string) bool { return p == gone })
	const n = 20000
	heirs := map[string]int{}
	moved := 0
	for _, u := range users(n) {
		before, after := Owner(u, peers), Owner(u, left)
		switch {
		case before == gone:
			heirs[after]++
		case after != before:
			moved++
		}
	}
	if moved != 0 {
		t.Errorf("%s left, and %d users of the others moved", gone, moved)
	}
	total := 0
	for _, c := range heirs {
		total += c
	}
	for _, p := range left {
		if share := float64(heirs[p]) / float64(total); share < 0.25 || share > 0.42 {
			t.Errorf("%s inherited %d of the %d users of %s (%.2f), want about a third", p, heirs[p], total, gone, share)
		}
	}
	// Joining is leaving backwards: the users that move go to the newcomer.
	for _, u := range users(n) {
		if before, after := Owner(u, left), Owner(u, peers); after != before && after != gone {
			t.Fatalf("%s joined, and %s moved from %s to %s", gone, u, before, after)
		}
	}
}
