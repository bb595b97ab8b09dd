package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/gen/pointledger/v1/pointledgerv1connect"
	"github.com/pointledger/pointledger/internal/auth"
)

// Secure by default: no credentials, no serving.
func TestServeRefusesToStartWithoutCredentials(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	none := func(string) string { return "" }
	err := run(context.Background(), []string{"serve"}, none, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "no credentials configured") || !strings.Contains(err.Error(), "-insecure-dev") {
		t.Errorf("serve without credentials: %v, want a refusal naming -auth-file and -insecure-dev", err)
	}
	bad := filepath.Join(t.TempDir(), "credentials.json")
	if err := os.WriteFile(bad, []byte(`{"issuer":"i","audience":"a"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{
		"unusable file":             {"serve", "-auth-file", bad},
		"missing file":              {"serve", "-auth-file", bad + ".missing"},
		"insecure with credentials": {"serve", "-insecure-dev", "-auth-file", bad},
		"negative rate":             {"serve", "-insecure-dev", "-rate-limit", "-1"},
		"NaN rate":                  {"serve", "-insecure-dev", "-rate-limit", "NaN"},
		"infinite rate":             {"serve", "-insecure-dev", "-rate-limit", "+Inf"},
		"no user token lifetime":    {"serve", "-insecure-dev", "-user-token-max-lifetime", "0"},
	} {
		// Should serve start all the same, it stops at the deadline and the
		// test fails instead of hanging.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := run(ctx, args, none, &out, &errOut); err == nil {
			t.Errorf("%s: serve started", name)
		}
		cancel()
	}
	nanRate := func(k string) string {
		if k == "LEDGER_RATE_LIMIT" {
			return "NaN" // would pass a < 0 check, and turn the limit off
		}
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := run(ctx, []string{"serve", "-insecure-dev"}, nanRate, &out, &errOut); err == nil {
		t.Error("LEDGER_RATE_LIMIT=NaN: serve started")
	}
	insecureEnv := func(k string) string {
		if k == "LEDGER_INSECURE_DEV" {
			return "true"
		}
		return ""
	}
	if err := run(context.Background(), []string{"serve"}, insecureEnv, &out, &errOut); err == nil || !strings.Contains(err.Error(), "no credentials") {
		t.Errorf("serve with only an environment variable asking for insecurity: %v, want a refusal", err)
	}
}

// -insecure-dev serves without tokens, and says so loudly.
func TestServeInsecureDev(t *testing.T) {
	t.Parallel()
	p := startLedgerdAuth(t, true)
	c := pointledgerv1connect.NewLedgerServiceClient(http.DefaultClient, "http://"+p.addr)
	if _, err := c.Grant(context.Background(), connect.NewRequest(&pb.GrantRequest{UserId: "dev", Amount: "1", RequestId: "g"})); err != nil {
		t.Errorf("grant without a token under -insecure-dev: %v", err)
	}
	if !strings.Contains(p.out.String(), "level=WARN") || !strings.Contains(p.out.String(), "INSECURE") {
		t.Errorf("ledgerd -insecure-dev did not warn:\n%s", p.out)
	}
}

// The served binary wants tokens; `ledgerd token` mints user tokens that it
// accepts for their own user only.
func TestServeWithTokens(t *testing.T) {
	t.Parallel()
	p := startLedgerd(t)
	ctx := context.Background()
	anon := pointledgerv1connect.NewLedgerServiceClient(http.DefaultClient, "http://"+p.addr)
	if _, err := anon.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: "alice"})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("GetBalance without a token: %v, want unauthenticated", err)
	}
	if res, err := http.Get("http://" + p.addr + "/healthz"); err != nil {
		t.Errorf("/healthz without a token: %v, want 200", err)
	} else {
		_ = res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("/healthz without a token: %s, want 200", res.Status)
		}
	}
	if _, err := p.ledgerClient().Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "alice", Amount: "3", RequestId: "g"})); err != nil {
		t.Fatal(err)
	}
	authFile := ""
	for _, kv := range p.env {
		if v, ok := strings.CutPrefix(kv, "LEDGER_AUTH_FILE="); ok {
			authFile = v
		}
	}
	mint := exec.Command(p.bin, "token", "-auth-file", authFile, "-user", "alice", "-ttl", "5m")
	tok, err := mint.Output()
	if err != nil {
		t.Fatalf("ledgerd token: %v", err)
	}
	alice := pointledgerv1connect.NewLedgerServiceClient(http.DefaultClient, "http://"+p.addr,
		connect.WithInterceptors(auth.Bearer(strings.TrimSpace(string(tok)))))
	res, err := alice.Purchase(ctx, connect.NewRequest(&pb.PurchaseRequest{UserId: "alice", Amount: "1", RequestId: "p"}))
	if err != nil || res.Msg.Balance != "2" {
		t.Errorf("alice purchases with her token: %v, %v", res, err)
	}
	if _, err := alice.Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "alice", Amount: "100", RequestId: "g2"})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("alice grants herself points: %v, want permission_denied", err)
	}
	if _, err := alice.GetBalance(ctx, connect.NewRequest(&pb.GetBalanceRequest{UserId: "bob"})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("alice reads bob's balance: %v, want permission_denied", err)
	}
}

func TestTokenCommand(t *testing.T) {
	t.Parallel()
	none := func(string) string { return "" }
	var out, errOut bytes.Buffer
	for _, role := range []string{"service", "peer", "support"} {
		out.Reset()
		errOut.Reset()
		if err := run(context.Background(), []string{"token", "-new", role, "-name", "n"}, none, &out, &errOut); err != nil {
			t.Fatal(err)
		}
		secret := strings.TrimSpace(out.String())
		if !strings.Contains(errOut.String(), auth.HashToken(secret)) || !strings.Contains(errOut.String(), `"role": "`+role+`"`) {
			t.Errorf("-new %s printed %q and %q: want the token and its credentials entry", role, secret, errOut.String())
		}
	}
	for _, args := range [][]string{{"token"}, {"token", "-user", "alice"}, {"token", "-new", "user"}, {"token", "-new", "admin"}, {"token", "-new", "peer"}} {
		if err := run(context.Background(), args, none, &out, &errOut); err == nil {
			t.Errorf("ledgerd %v succeeded", args)
		}
	}
}

// serve accepts, and `ledgerd token` mints, user tokens up to the same
// maximum lifetime, from the same flag or variable.
func TestUserTokenMaxLifetime(t *testing.T) {
	t.Parallel()
	creds := auth.GenerateDev().Credentials
	authFile := filepath.Join(t.TempDir(), "credentials.json")
	if err := os.WriteFile(authFile, creds.JSON(), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    time.Duration
		wantErr string // in the errors of serve's setup and of token
	}{
		{name: "default", want: 24 * time.Hour},
		{name: "flag", args: []string{"-user-token-max-lifetime", "2h"}, want: 2 * time.Hour},
		{name: "variable", env: map[string]string{"LEDGER_USER_TOKEN_MAX_LIFETIME": "3h"}, want: 3 * time.Hour},
		{name: "flag wins", args: []string{"-user-token-max-lifetime", "2h"}, env: map[string]string{"LEDGER_USER_TOKEN_MAX_LIFETIME": "3h"}, want: 2 * time.Hour},
		{name: "zero", args: []string{"-user-token-max-lifetime", "0"}, wantErr: "-user-token-max-lifetime (LEDGER_USER_TOKEN_MAX_LIFETIME) must be more than 0"},
		{name: "negative", args: []string{"-user-token-max-lifetime", "-1h"}, wantErr: "-user-token-max-lifetime (LEDGER_USER_TOKEN_MAX_LIFETIME) must be more than 0"},
		{name: "variable not a duration", env: map[string]string{"LEDGER_USER_TOKEN_MAX_LIFETIME": "a day"}, wantErr: "LEDGER_USER_TOKEN_MAX_LIFETIME"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			getenv := func(k string) string { return tc.env[k] }
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var ac authConfig
			err := ac.flags(fs, getenv)
			if err == nil {
				err = fs.Parse(append([]string{"-auth-file", authFile}, tc.args...))
			}
			var a *auth.Authenticator
			if err == nil {
				a, err = ac.authenticator(getenv)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("serve: %v, want an error with %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatalf("serve: %v", err)
			} else if a.MaxLifetime != tc.want {
				t.Errorf("serve: a maximum lifetime of %v, want %v", a.MaxLifetime, tc.want)
			}

			// token: the maximum mints and passes serve's check, a second more
			// is refused.
			mint := func(ttl time.Duration) (string, error) {
				var out bytes.Buffer
				args := append([]string{"token", "-auth-file", authFile, "-user", "alice", "-ttl", ttl.String()}, tc.args...)
				err := run(context.Background(), args, getenv, &out, io.Discard)
				return strings.TrimSpace(out.String()), err
			}
			if tc.wantErr != "" {
				if _, err := mint(time.Hour); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("token: %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			tok, err := mint(tc.want)
			if err != nil {
				t.Fatalf("token -ttl %v: %v", tc.want, err)
			}
			if _, err := a.Authenticate("Bearer " + tok); err != nil {
				t.Errorf("serve refuses a token minted for the maximum: %v", err)
			}
			if _, err := mint(tc.want + time.Second); err == nil || !strings.Contains(err.Error(), "longer than -user-token-max-lifetime") {
				t.Errorf("token -ttl %v: %v, want a refusal naming -user-token-max-lifetime", tc.want+time.Second, err)
			}
		})
	}
}
