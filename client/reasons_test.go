package client_test

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/pointledger/pointledger/client"
	"github.com/pointledger/pointledger/internal/api"
)

// reasonConstants returns the string constants named Reason* declared in
// the non-test Go files of dir, by value.
func reasonConstants(t *testing.T, dir string) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Reason") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					value, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					out[value] = name.Name
				}
			}
		}
	}
	return out
}

// The client names every reason the server sends, and only those: the
// domain's (internal/ledger), authentication's (internal/auth) and the
// API's own (internal/api). A reason added there fails here until it is
// added to reasons.go.
func TestReasonsAreTheServers(t *testing.T) {
	t.Parallel()
	server := map[string]string{}
	for _, dir := range []string{"../internal/ledger", "../internal/auth", "../internal/api"} {
		for value, name := range reasonConstants(t, dir) {
			server[value] = dir + "." + name
		}
	}
	ours := reasonConstants(t, ".")
	for _, value := range slices.Sorted(maps.Keys(server)) {
		if _, ok := ours[value]; !ok {
			t.Errorf("%s (%s) has no constant in package client", value, server[value])
		}
	}
	for _, value := range slices.Sorted(maps.Keys(ours)) {
		if _, ok := server[value]; !ok {
			t.Errorf("client.%s = %q: the server sends no such reason", ours[value], value)
		}
		// One spelling: the constant is the value in CamelCase.
		want := "Reason"
		for word := range strings.SplitSeq(value, "_") {
			want += word[:1] + strings.ToLower(word[1:])
		}
		want = strings.NewReplacer("Id", "ID", "Url", "URL").Replace(want)
		if ours[value] != want {
			t.Errorf("client.%s = %q: want it named %s", ours[value], value, want)
		}
	}
	listed := map[string]bool{}
	for _, r := range client.Reasons() {
		listed[string(r)] = true
	}
	if len(listed) != len(ours) || len(client.Reasons()) != len(ours) {
		t.Errorf("Reasons() lists %d reasons (%d distinct), want the %d constants", len(client.Reasons()), len(listed), len(ours))
	}
	for value := range ours {
		if !listed[value] {
			t.Errorf("Reasons() lacks %s", value)
		}
	}
	if client.ErrorDomain != api.ErrorDomain {
		t.Errorf("client.ErrorDomain = %q, want the server's %q", client.ErrorDomain, api.ErrorDomain)
	}
}

func TestReasonOfReadsOurErrorInfo(t *testing.T) {
	t.Parallel()
	withInfo := func(info *errdetails.ErrorInfo) error {
		err := connect.NewError(connect.CodeFailedPrecondition, errors.New("refused"))
		if info != nil {
			d, derr := connect.NewErrorDetail(info)
			if derr != nil {
				t.Fatal(derr)
			}
			err.AddDetail(d)
		}
		return err
	}
	for _, tc := range []struct {
		name     string
		err      error
		reason   client.Reason
		replayed bool
	}{
		{name: "nil", err: nil},
		{name: "not a connect error", err: errors.New("boom")},
		{name: "no detail", err: withInfo(nil)},
		{name: "reason", err: withInfo(&errdetails.ErrorInfo{Reason: "HOLD_EXPIRED", Domain: client.ErrorDomain}), reason: client.ReasonHoldExpired},
		{name: "wrapped", err: fmt.Errorf("purchase: %w", withInfo(&errdetails.ErrorInfo{Reason: "HOLD_EXPIRED", Domain: client.ErrorDomain})), reason: client.ReasonHoldExpired},
		{
			name:   "replayed",
			err:    withInfo(&errdetails.ErrorInfo{Reason: "ACCOUNT_FROZEN", Domain: client.ErrorDomain, Metadata: map[string]string{"replayed": "true"}}),
			reason: client.ReasonAccountFrozen, replayed: true,
		},
		{name: "another domain's", err: withInfo(&errdetails.ErrorInfo{Reason: "QUOTA", Domain: "proxy.example.com"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := client.ReasonOf(tc.err); got != tc.reason {
				t.Errorf("ReasonOf = %q, want %q", got, tc.reason)
			}
			if got := client.IsReplayed(tc.err); got != tc.replayed {
				t.Errorf("IsReplayed = %v, want %v", got, tc.replayed)
			}
		})
	}
}

func TestNewRequestIDIsAValidUniqueULID(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 10000 {
		id := client.NewRequestID()
		if len(id) != 26 || strings.Trim(id, "0123456789ABCDEFGHJKMNPQRSTVWXYZ") != "" {
			t.Fatalf("NewRequestID() = %q, want a ULID", id)
		}
		if seen[id] {
			t.Fatalf("NewRequestID() = %q twice", id)
		}
		seen[id] = true
	}
}

// Every reason the server sends is in the docs: the domain's and the API's
// in the Errors section of docs/design.md, authentication's in the Security
// section of docs/operations.md.
func TestReasonsAreDocumented(t *testing.T) {
	t.Parallel()
	type section struct{ file, heading string }
	errorsTable, security := section{"../docs/design.md", "## Errors"}, section{"../docs/operations.md", "## Security"}
	docs := map[string]section{"../internal/ledger": errorsTable, "../internal/api": errorsTable, "../internal/auth": security}
	for _, dir := range slices.Sorted(maps.Keys(docs)) {
		doc := docs[dir]
		b, err := os.ReadFile(doc.file)
		if err != nil {
			t.Fatal(err)
		}
		_, text, ok := strings.Cut(string(b), "\n"+doc.heading+"\n")
		if !ok {
			t.Fatalf("%s has no %q", doc.file, doc.heading)
		}
		if end := strings.Index(text, "\n## "); end >= 0 {
			text = text[:end]
		}
		for value, name := range reasonConstants(t, dir) {
			if !strings.Contains(text, "`"+value+"`") {
				t.Errorf("%s.%s = %q is not in %s's %q", dir, name, value, doc.file, doc.heading)
			}
		}
	}
}
