package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// A -as-of that is no RFC 3339 time is refused before anything is read.
func TestReconcileAsOfMustBeATime(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"yesterday", "2026-03-31", "2026-03-31 23:59:59Z"} {
		var out, errOut bytes.Buffer
		err := reconcileCmd(context.Background(), []string{"-as-of", v}, func(string) string { return "" }, &out, &errOut)
		var exit *exitError
		if !errors.As(err, &exit) || exit.code != 2 || !strings.Contains(err.Error(), "-as-of") {
			t.Errorf("-as-of %q: %v, want exit 2 naming -as-of", v, err)
		}
	}
}
