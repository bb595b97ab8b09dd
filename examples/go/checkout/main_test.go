package main

import (
	"context"
	"strings"
	"testing"

	"github.com/pointledger/pointledger/internal/auth"
	"github.com/pointledger/pointledger/internal/servetest"
)

// The checkout against ledgerd's API in this process, over each protocol;
// cmd/ledgerd's TestExamplesBesideMakeRun runs it against `make run`.
func TestCheckout(t *testing.T) {
	t.Parallel()
	creds := auth.GenerateDev()
	a, err := auth.NewAuthenticator(creds.Credentials)
	if err != nil {
		t.Fatal(err)
	}
	srv := servetest.New(t, servetest.Options{Auth: a})
	env := map[string]string{"LEDGER_URL": srv.URL, "TOKEN": creds.ServiceToken}
	for _, protocol := range []string{"connect", "grpc", "grpcweb"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel()
			var out strings.Builder
			if err := run(context.Background(), []string{"-protocol", protocol}, func(k string) string { return env[k] }, &out); err != nil {
				t.Fatalf("checkout: %v\n%s", err, out.String())
			}
			if !strings.HasSuffix(out.String(), "checkout ok\n") {
				t.Errorf("checkout printed:\n%s", out.String())
			}
		})
	}
	var out strings.Builder
	if err := run(context.Background(), nil, func(string) string { return "" }, &out); err == nil || !strings.Contains(err.Error(), "make run") {
		t.Errorf("checkout without LEDGER_URL: %v, want an error that says to start make run", err)
	}
	other := map[string]string{"LEDGER_URL": srv.URL, "TOKEN": "not-a-token"}
	if err := run(context.Background(), nil, func(k string) string { return other[k] }, &out); err == nil || !strings.Contains(err.Error(), "unauthenticated") {
		t.Errorf("checkout with a wrong token: %v, want unauthenticated", err)
	}
}
