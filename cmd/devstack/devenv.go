package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pointledger/pointledger/internal/auth"
)

// devEnv is what the commands beside a running devstack need to know.
type devEnv struct {
	endpoint string               // DynamoDB Local
	authFile string               // ledgerd's credentials
	dev      *auth.DevCredentials // the dev credentials, when devstack made them
	listen   string               // ledgerd's API address
	ops      string               // its operations listener; "off" for none
}

// writeDevEnv writes e as shell exports (`. .local/dev.env`), readable by
// its owner only: it holds tokens.
func writeDevEnv(path string, e devEnv) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by `make run` (cmd/devstack) for this run; removed when it stops.\n")
	fmt.Fprintf(&b, "# Load it with: . %s\n", path)
	export := func(name, value string) { fmt.Fprintf(&b, "export %s=%s\n", name, shellQuote(value)) }
	export("LEDGER_DYNAMODB_ENDPOINT", e.endpoint)
	export("LEDGER_AUTH_FILE", e.authFile)
	export("LEDGER_URL", "http://"+localHost(e.listen))
	export("LEDGER_CONSOLE_URL", "http://"+localHost(e.listen)+"/console/")
	if e.ops != "off" {
		export("LEDGER_OPS_URL", "http://"+localHost(e.ops))
	}
	if e.dev != nil {
		export("TOKEN", e.dev.ServiceToken)
		export("ADMIN_TOKEN", e.dev.AdminToken)
		// The console's support operator (dev-support).
		export("SUPPORT_TOKEN", e.dev.SupportToken)
		// What a second ledgerd beside it needs to forward to it (-peers).
		export("LEDGER_PEER_TOKEN", e.dev.PeerToken)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o600)
}

// localHost is addr as a client on this machine dials it: ":8080" is
// "localhost:8080".
func localHost(addr string) string {
	if strings.HasPrefix(addr, ":") {
		return "localhost" + addr
	}
	return addr
}

// shellQuote quotes s for sh, unless it needs none.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
