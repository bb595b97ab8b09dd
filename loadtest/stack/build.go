package stack

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// ledgerdPackage is what the load tool builds when -ledgerd names no
// binary: the ledgerd of the checkout it runs in (the module go finds from
// the working directory).
const ledgerdPackage = "github.com/pointledger/pointledger/cmd/ledgerd"

// BuildLedgerd builds ledgerdPackage into dir, so that a run measures the
// code it was run from, never a bin/ledgerd left from an older checkout.
// It returns the binary and the commit it was built from ("76a8658",
// "76a8658+changes" when the tree differs from it; "" when git cannot say).
func BuildLedgerd(ctx context.Context, dir string) (bin, commit string, err error) {
	bin = filepath.Join(dir, "ledgerd")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ledgerdPackage).CombinedOutput()
	if err != nil {
		return "", "", fmt.Errorf("build ledgerd (%s; run the load tool inside the repository, or give -ledgerd): %w\n%s",
			ledgerdPackage, err, out)
	}
	return bin, checkoutCommit(ctx), nil
}

// checkoutCommit names the commit of the working tree, marked when the tree
// has changes; "" outside a git checkout.
func checkoutCommit(ctx context.Context) string {
	head, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	commit := strings.TrimSpace(string(head))
	status, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output()
	if err != nil {
		return ""
	}
	if len(strings.TrimSpace(string(status))) > 0 {
		commit += "+changes"
	}
	return commit
}
