package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/auth"
)

// Two installations on tables of the same name, with credentials of their
// own, give out different page tokens, and each refuses the other's (issue
// 22, item 6): the default key used to derive from the table's name, so
// every default install gave the README's tokens, and anyone who knew the
// name could make one.
func TestPageTokensOfAnotherInstallationAreRefused(t *testing.T) {
	t.Parallel()
	one := startLedgerd(t)
	other := startLedgerd(t) // the same test: the same tables, other credentials
	ctx := context.Background()
	for _, id := range []string{"g1", "g2"} {
		if _, err := one.ledgerClient().Grant(ctx, connect.NewRequest(&pb.GrantRequest{UserId: "alice", Amount: "1", RequestId: id})); err != nil {
			t.Fatalf("grant %s: %v", id, err)
		}
	}
	firstPage := func(p *ledgerdProcess) string {
		t.Helper()
		res, err := p.ledgerClient().ListEntries(ctx, connect.NewRequest(&pb.ListEntriesRequest{UserId: "alice", PageSize: 1}))
		if err != nil || res.Msg.GetNextPageToken() == "" {
			t.Fatalf("first page: %v, next page token %q", err, res.Msg.GetNextPageToken())
		}
		return res.Msg.GetNextPageToken()
	}
	token, otherToken := firstPage(one), firstPage(other)
	if token == otherToken {
		t.Errorf("both installations gave the page token %s", token)
	}
	next := &pb.ListEntriesRequest{UserId: "alice", PageSize: 1, PageToken: token}
	if _, err := one.ledgerClient().ListEntries(ctx, connect.NewRequest(next)); err != nil {
		t.Fatalf("the second page, from the installation that gave the token: %v", err)
	}
	_, err := other.ledgerClient().ListEntries(ctx, connect.NewRequest(next))
	if code, reason := errorReason(err); code != connect.CodeInvalidArgument || reason != "INVALID_PAGE_TOKEN" {
		t.Errorf("the other installation's token: %v, want invalid_argument INVALID_PAGE_TOKEN", err)
	}
}

func TestServedPageTokenKey(t *testing.T) {
	t.Parallel()
	authenticator := func(creds *auth.Credentials) *auth.Authenticator {
		a, err := auth.NewAuthenticator(creds)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	noEnv := func(string) string { return "" }
	creds := auth.GenerateDev().Credentials
	key, err := servedPageTokenKey(authenticator(creds), noEnv)
	if err != nil || len(key) != 32 {
		t.Fatalf("key %x, %v, want 32 bytes", key, err)
	}
	if signing, _ := base64.StdEncoding.DecodeString(creds.UserTokenKeys[0]); bytes.Equal(signing, key) {
		t.Error("the page token key is the signing key")
	}
	// Every instance and restart with the same credentials agrees.
	if again, _ := servedPageTokenKey(authenticator(creds), noEnv); string(again) != string(key) {
		t.Errorf("the same credentials derive %x, then %x", key, again)
	}
	if other, _ := servedPageTokenKey(authenticator(auth.GenerateDev().Credentials), noEnv); string(other) == string(key) {
		t.Error("other credentials derive the same key")
	}
	// LEDGER_PAGE_TOKEN_KEY wins (pageTokens reads it), and -insecure-dev
	// has no secret: the table's name it is.
	withKey := func(name string) string {
		if name == "LEDGER_PAGE_TOKEN_KEY" {
			return strings.Repeat("ab", 32)
		}
		return ""
	}
	if k, err := servedPageTokenKey(authenticator(creds), withKey); k != nil || err != nil {
		t.Errorf("with LEDGER_PAGE_TOKEN_KEY: %x, %v, want none", k, err)
	}
	if k, err := servedPageTokenKey(auth.InsecureDev(), noEnv); k != nil || err != nil {
		t.Errorf("-insecure-dev: %x, %v, want none", k, err)
	}
	// Credentials with tokens only have no secret to derive from: serve
	// refuses to start without LEDGER_PAGE_TOKEN_KEY rather than use a key
	// anyone can work out.
	tokensOnly := *creds
	tokensOnly.UserTokenKeys = nil
	if _, err := servedPageTokenKey(authenticator(&tokensOnly), noEnv); err == nil || !strings.Contains(err.Error(), "LEDGER_PAGE_TOKEN_KEY") {
		t.Errorf("credentials without user token keys: %v, want an error naming LEDGER_PAGE_TOKEN_KEY", err)
	}
	if _, err := servedPageTokenKey(authenticator(&tokensOnly), withKey); err != nil {
		t.Errorf("credentials without user token keys, with LEDGER_PAGE_TOKEN_KEY: %v", err)
	}
}
