package auth_test

import (
	"strings"
	"testing"
	"time"

	"github.com/pointledger/pointledger/internal/auth"
)

func TestParseCredentialsRefusesWhatCouldNotWork(t *testing.T) {
	t.Parallel()
	good := auth.GenerateDev().Credentials
	if _, err := auth.ParseCredentials(good.JSON()); err != nil {
		t.Fatalf("generated credentials: %v", err)
	}
	hash := auth.HashToken("x")
	for _, tc := range []struct{ name, json, want string }{
		{"empty", `{}`, "issuer and audience"},
		{"nobody", `{"issuer":"i","audience":"a"}`, "nobody could call"},
		{"short key", `{"issuer":"i","audience":"a","user_token_keys":["c2hvcnQ="]}`, "at least 32"},
		{"not base64", `{"issuer":"i","audience":"a","user_token_keys":["!!"]}`, "not base64"},
		{"user role listed", `{"issuer":"i","audience":"a","tokens":[{"name":"n","role":"user","sha256":"` + hash + `"}]}`, "want service or admin"},
		{"bad hash", `{"issuer":"i","audience":"a","tokens":[{"name":"n","role":"admin","sha256":"abc"}]}`, "64 hex"},
		{"same name", `{"issuer":"i","audience":"a","tokens":[{"name":"n","role":"admin","sha256":"` + hash + `"},{"name":"n","role":"service","sha256":"` + hash + `"}]}`, "name of its own"},
		{"misspelt field", `{"issuer":"i","audience":"a","user_token_key":["x"]}`, "unknown field"},
	} {
		if _, err := auth.ParseCredentials([]byte(tc.json)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

func TestUserTokens(t *testing.T) {
	t.Parallel()
	creds := auth.GenerateDev().Credentials
	a, err := auth.NewAuthenticator(creds)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	a.Now = func() time.Time { return now }
	tok, err := auth.MintUserToken(creds, "alice", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	id, err := a.Authenticate("Bearer " + tok)
	if err != nil || id != (auth.Identity{Role: auth.RoleUser, Subject: "alice"}) {
		t.Errorf("fresh token: %v, %v", id, err)
	}
	now = now.Add(2 * time.Hour)
	if _, err := a.Authenticate("Bearer " + tok); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("token 1 h past expiry: %v, want expired", err)
	}
	// Key rotation: a new key in front signs, the old one still verifies.
	rotated := *creds
	rotated.UserTokenKeys = append([]string{auth.NewKey()}, creds.UserTokenKeys...)
	b, err := auth.NewAuthenticator(&rotated)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Authenticate("Bearer " + tok); err != nil {
		t.Errorf("a token of the old key after rotation: %v", err)
	}
	if _, err := auth.MintUserToken(creds, "al#ice", time.Hour, now); err == nil {
		t.Error("minted a token for user id al#ice")
	}
}

func TestOpaqueTokens(t *testing.T) {
	t.Parallel()
	d := auth.GenerateDev()
	a, err := auth.NewAuthenticator(d.Credentials)
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]auth.Identity{
		d.ServiceToken: {Role: auth.RoleService, Subject: "dev-service"},
		d.AdminToken:   {Role: auth.RoleAdmin, Subject: "dev-admin"},
	} {
		if id, err := a.Authenticate("bearer " + token); err != nil || id != want {
			t.Errorf("%s: %v, %v; want %v", want.Subject, id, err, want)
		}
	}
	if _, err := a.Authenticate("Bearer " + d.ServiceToken + "x"); err == nil {
		t.Error("a token one character longer was accepted")
	}
}

func TestDevCredentialsRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir() + "/creds"
	if _, err := auth.ReadDevDir(dir); err == nil {
		t.Fatal("read credentials from a missing folder")
	}
	d := auth.GenerateDev()
	if _, err := d.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	got, err := auth.ReadDevDir(dir)
	if err != nil || got.ServiceToken != d.ServiceToken || got.AdminToken != d.AdminToken || got.Credentials.UserTokenKeys[0] != d.Credentials.UserTokenKeys[0] {
		t.Errorf("read back %+v, %v; want what was written", got, err)
	}
}

func TestLimiter(t *testing.T) {
	t.Parallel()
	now := time.Unix(1e9, 0)
	l := auth.NewLimiter(2, 2, func() time.Time { return now })
	alice := auth.Identity{Role: auth.RoleUser, Subject: "alice"}
	bob := auth.Identity{Role: auth.RoleUser, Subject: "bob"}
	allowed := func(id auth.Identity, n int) int {
		k := 0
		for range n {
			if l.Allow(id) {
				k++
			}
		}
		return k
	}
	if got := allowed(alice, 5); got != 2 {
		t.Errorf("a burst of 5 with burst 2: %d allowed", got)
	}
	if got := allowed(bob, 2); got != 2 {
		t.Errorf("bob, after alice emptied her bucket: %d of 2 allowed", got)
	}
	now = now.Add(500 * time.Millisecond) // 2/s: one token back
	if got := allowed(alice, 5); got != 1 {
		t.Errorf("after 0.5 s at 2/s: %d allowed, want 1", got)
	}
	now = now.Add(time.Hour) // refilled to the burst, not beyond; idle buckets swept
	if got := allowed(alice, 5); got != 2 {
		t.Errorf("after an hour: %d allowed, want the burst of 2", got)
	}
	if auth.NewLimiter(0, 10, nil) != nil || !(*auth.Limiter)(nil).Allow(alice) {
		t.Error("rate 0 is not off")
	}
}
