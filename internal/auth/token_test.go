package auth_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
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
		{"user role listed", `{"issuer":"i","audience":"a","tokens":[{"name":"n","role":"user","sha256":"` + hash + `"}]}`, "want service, admin, support or peer"},
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

// b64 is a JWT segment: base64url without padding.
func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// handMade is a user token with header and payload exactly as given, and
// segments as given, signed by the first user token key of creds: only what
// a test makes wrong is wrong.
func handMade(tb testing.TB, creds *auth.Credentials, headerSeg, payloadSeg string) string {
	tb.Helper()
	key, err := base64.StdEncoding.DecodeString(creds.UserTokenKeys[0])
	if err != nil {
		tb.Fatal(err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(headerSeg + "." + payloadSeg))
	return headerSeg + "." + payloadSeg + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// nonCanonical flips the lowest of the unused low bits of seg's last
// character: another string that a lax decoder reads as the same bytes.
func nonCanonical(tb testing.TB, seg string) string {
	tb.Helper()
	if len(seg)%4 == 0 {
		tb.Fatalf("segment %q has no unused bits", seg)
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	i := strings.IndexByte(alphabet, seg[len(seg)-1])
	return seg[:len(seg)-1] + string(alphabet[i^1])
}

// Tokens signed with the right key that get one property wrong are refused
// as INVALID_TOKEN; a well-formed one passes beside them.
func TestHostileUserTokens(t *testing.T) {
	t.Parallel()
	creds := auth.GenerateDev().Credentials
	a, err := auth.NewAuthenticator(creds)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	a.Now = func() time.Time { return now }
	const header = `{"alg":"HS256","typ":"JWT"}`
	const maxLifetime = 24 * time.Hour // the default, as docs/operations.md says
	// claims is a payload for alice; exp, iat and nbf are raw JSON, "" for none.
	claims := func(exp, iat, nbf string) string {
		s := fmt.Sprintf(`{"iss":%q,"aud":%q,"sub":"alice"`, creds.Issuer, creds.Audience)
		for _, c := range [][2]string{{"exp", exp}, {"iat", iat}, {"nbf", nbf}} {
			if c[1] != "" {
				s += `,"` + c[0] + `":` + c[1]
			}
		}
		return s + "}"
	}
	unix := func(d time.Duration) string { return fmt.Sprint(now.Add(d).Unix()) }
	good := claims(unix(time.Hour), unix(0), unix(0))
	goodToken := handMade(t, creds, b64(header), b64(good))
	parts := strings.Split(goodToken, ".")
	// A payload one byte longer ends its segment in unused bits.
	padded := b64(good + " ")
	if len(padded)%4 == 0 {
		padded = b64(good + "  ")
	}
	for _, tc := range []struct {
		name    string
		token   string
		reason  string // "" for accepted
		message string // in the refusal
	}{
		{name: "well formed", token: goodToken},
		{name: "without typ", token: handMade(t, creds, b64(`{"alg":"HS256"}`), b64(good))},
		{name: "exp with a fraction", token: handMade(t, creds, b64(header), b64(claims(unix(time.Hour)+".5", "", "")))},
		{name: "exp at the maximum lifetime", token: handMade(t, creds, b64(header), b64(claims(unix(maxLifetime), "", "")))},

		{name: "signature encoded non-canonically", token: parts[0] + "." + parts[1] + "." + nonCanonical(t, parts[2]), reason: auth.ReasonInvalidToken},
		{name: "payload encoded non-canonically", token: handMade(t, creds, b64(header), nonCanonical(t, padded)), reason: auth.ReasonInvalidToken},
		{name: "exp a string", token: handMade(t, creds, b64(header), b64(claims(`"`+unix(time.Hour)+`"`, "", ""))), reason: auth.ReasonInvalidToken, message: "number"},
		{name: "iat a string", token: handMade(t, creds, b64(header), b64(claims(unix(time.Hour), `"`+unix(0)+`"`, ""))), reason: auth.ReasonInvalidToken, message: "number"},
		{name: "nbf a string", token: handMade(t, creds, b64(header), b64(claims(unix(time.Hour), "", `"`+unix(0)+`"`))), reason: auth.ReasonInvalidToken, message: "number"},
		{name: "iat null", token: handMade(t, creds, b64(header), b64(claims(unix(time.Hour), "null", ""))), reason: auth.ReasonInvalidToken, message: "number"},
		{name: "EXP a string", token: handMade(t, creds, b64(header), b64(strings.TrimSuffix(claims(unix(time.Hour), "", ""), "}")+`,"EXP":"`+unix(time.Hour)+`"}`)), reason: auth.ReasonInvalidToken, message: "case-sensitive"},
		{name: "a second sub spelt with a long s", token: handMade(t, creds, b64(header), b64(strings.TrimSuffix(good, "}")+`,"ſub":"bob"}`)), reason: auth.ReasonInvalidToken, message: "case-sensitive"},
		{name: "crit naming an extension", token: handMade(t, creds, b64(`{"alg":"HS256","typ":"JWT","crit":["exp"]}`), b64(good)), reason: auth.ReasonInvalidToken, message: "crit"},
		{name: "crit empty", token: handMade(t, creds, b64(`{"alg":"HS256","crit":[]}`), b64(good)), reason: auth.ReasonInvalidToken, message: "crit"},
		{name: "exp 31 years ahead", token: handMade(t, creds, b64(header), b64(claims(unix(31*365*24*time.Hour), unix(0), ""))), reason: auth.ReasonInvalidToken, message: "lifetime too long"},
		{name: "exp a minute past the maximum lifetime and the skew", token: handMade(t, creds, b64(header), b64(claims(unix(maxLifetime+time.Minute), "", ""))), reason: auth.ReasonInvalidToken, message: "lifetime too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id, err := a.Authenticate("Bearer " + tc.token)
			if tc.reason == "" {
				if err != nil || id != (auth.Identity{Role: auth.RoleUser, Subject: "alice"}) {
					t.Errorf("%s: %v, %v; want alice", tc.token, id, err)
				}
				return
			}
			if got := auth.ReasonOf(err); got != tc.reason || !strings.Contains(fmt.Sprint(err), tc.message) {
				t.Errorf("%s: %v (%s), want %s with %q", tc.token, err, got, tc.reason, tc.message)
			}
		})
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
		d.PeerToken:    {Role: auth.RolePeer, Subject: "dev-peer"},
		d.SupportToken: {Role: auth.RoleSupport, Subject: "dev-support"},
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
	if err != nil || got.ServiceToken != d.ServiceToken || got.AdminToken != d.AdminToken || got.PeerToken != d.PeerToken || got.SupportToken != d.SupportToken ||
		got.Credentials.UserTokenKeys[0] != d.Credentials.UserTokenKeys[0] {
		t.Errorf("read back %+v, %v; want what was written", got, err)
	}
	// A folder from before peers: no peer token, until one is added.
	if err := os.Remove(filepath.Join(dir, auth.DevPeerTokenFile)); err != nil {
		t.Fatal(err)
	}
	old, err := auth.ReadDevDir(dir)
	if err != nil || old.PeerToken != "" {
		t.Fatalf("a folder without %s: %+v, %v; want it read, without a peer token", auth.DevPeerTokenFile, old, err)
	}
	old.AddPeer()
	a, err := auth.NewAuthenticator(old.Credentials)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := a.Authenticate("Bearer " + old.PeerToken); err != nil || id.Role != auth.RolePeer {
		t.Errorf("the peer token added: %v, %v; want role peer", id, err)
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
