package stack

import (
	"context"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// Without -ledgerd the load tool builds the ledgerd of its own checkout,
// and names the commit: a run never measures a stale bin/ledgerd.
func TestTheLoadToolBuildsTheLedgerdOfItsCheckout(t *testing.T) {
	t.Parallel()
	bin, commit, err := BuildLedgerd(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "ledgerd") {
		t.Fatalf("%s version: %v, %q", bin, err, out)
	}
	head, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		t.Skipf("not in a git checkout (%v): no commit to compare", err)
	}
	want := regexp.MustCompile(`^` + regexp.QuoteMeta(strings.TrimSpace(string(head))) + `(\+changes)?$`)
	if !want.MatchString(commit) {
		t.Errorf("commit = %q, want HEAD %s, marked +changes if the tree differs", commit, head)
	}
}
