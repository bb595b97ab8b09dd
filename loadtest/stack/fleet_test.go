package stack

import (
	"strings"
	"testing"
)

func TestInstancesLogsSayWhoseTheyAre(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	w := prefixed(&b, "ledgerd-2: ")
	for _, part := range []string{"first line\nsec", "ond line\n", "third"} {
		if _, err := w.Write([]byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.String(); got != "ledgerd-2: first line\nledgerd-2: second line\n" {
		t.Errorf("written %q", got)
	}
}
