package webhook

import (
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The Standard Webhooks test vector, from the specification's reference
// libraries: standard-webhooks/standard-webhooks,
// libraries/go/webhook_test.go (TestWebhookSign) and
// libraries/javascript/src/webhook.test.ts ("sign function works").
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorMsgID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	// A well-formed signature that is not the vector's, from the same
	// files' "invalid signature" and "multi sig" cases.
	vectorWrongSignature = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
)

func mustSecret(tb testing.TB, text string) Secret {
	tb.Helper()
	s, err := ParseSecret(text)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func vectorHeader(signature string) http.Header {
	h := http.Header{}
	h.Set(HeaderID, vectorMsgID)
	h.Set(HeaderTimestamp, strconv.Itoa(vectorTimestamp))
	h.Set(HeaderSignature, signature)
	return h
}

func TestSignStandardWebhooksVector(t *testing.T) {
	t.Parallel()
	secret := mustSecret(t, vectorSecret)
	got := Sign([]Secret{secret}, vectorMsgID, time.Unix(vectorTimestamp, 0), []byte(vectorBody))
	if got != vectorSignature {
		t.Errorf("Sign = %q, want the specification's %q", got, vectorSignature)
	}
	// The same through the headers a delivery carries.
	h := http.Header{}
	SetHeaders(h, []Secret{secret}, vectorMsgID, time.Unix(vectorTimestamp, 0), []byte(vectorBody))
	if want := vectorHeader(vectorSignature); fmt.Sprint(h) != fmt.Sprint(want) {
		t.Errorf("SetHeaders = %v, want %v", h, want)
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	secret := mustSecret(t, vectorSecret)
	other := NewSecret()
	at := time.Unix(vectorTimestamp, 0)
	tests := []struct {
		name    string
		secrets []Secret
		header  http.Header
		body    string
		now     time.Time
		ok      bool
	}{
		{name: "the vector", secrets: []Secret{secret}, header: vectorHeader(vectorSignature), body: vectorBody, now: at, ok: true},
		{name: "the vector, 4 minutes later", secrets: []Secret{secret}, header: vectorHeader(vectorSignature), body: vectorBody, now: at.Add(4 * time.Minute), ok: true},
		{name: "the vector, 4 minutes early", secrets: []Secret{secret}, header: vectorHeader(vectorSignature), body: vectorBody, now: at.Add(-4 * time.Minute), ok: true},
		{name: "several signatures, one good", secrets: []Secret{secret},
			header: vectorHeader(strings.Join([]string{vectorWrongSignature, "v2," + vectorSignature[3:], vectorSignature, vectorWrongSignature}, " ")),
			body:   vectorBody, now: at, ok: true},
		{name: "receiver knows two secrets", secrets: []Secret{other, secret}, header: vectorHeader(vectorSignature), body: vectorBody, now: at, ok: true},
		{name: "wrong signature", secrets: []Secret{secret}, header: vectorHeader(vectorWrongSignature), body: vectorBody, now: at},
		{name: "other secret", secrets: []Secret{other}, header: vectorHeader(vectorSignature), body: vectorBody, now: at},
		{name: "no secret", secrets: nil, header: vectorHeader(vectorSignature), body: vectorBody, now: at},
		{name: "body changed", secrets: []Secret{secret}, header: vectorHeader(vectorSignature), body: `{"test": 2432232315}`, now: at},
		{name: "body reformatted", secrets: []Secret{secret}, header: vectorHeader(vectorSignature), body: `{"test":2432232314}`, now: at},
		{name: "too old", secrets: []Secret{secret}, header: vectorHeader(vectorSignature), body: vectorBody, now: at.Add(DefaultTolerance + time.Second)},
		{name: "too new", secrets: []Secret{secret}, header: vectorHeader(vectorSignature), body: vectorBody, now: at.Add(-DefaultTolerance - time.Second)},
		{name: "v1a only", secrets: []Secret{secret}, header: vectorHeader("v1a," + vectorSignature[3:]), body: vectorBody, now: at},
		{name: "truncated", secrets: []Secret{secret}, header: vectorHeader(vectorSignature[:8]), body: vectorBody, now: at},
		{name: "empty signature", secrets: []Secret{secret}, header: vectorHeader("v1,"), body: vectorBody, now: at},
		{name: "no id", secrets: []Secret{secret}, header: without(vectorHeader(vectorSignature), HeaderID), body: vectorBody, now: at},
		{name: "no timestamp", secrets: []Secret{secret}, header: without(vectorHeader(vectorSignature), HeaderTimestamp), body: vectorBody, now: at},
		{name: "no signature", secrets: []Secret{secret}, header: without(vectorHeader(vectorSignature), HeaderSignature), body: vectorBody, now: at},
		{name: "timestamp not a number", secrets: []Secret{secret}, header: with(vectorHeader(vectorSignature), HeaderTimestamp, "hello"), body: vectorBody, now: at},
		{name: "other id", secrets: []Secret{secret}, header: with(vectorHeader(vectorSignature), HeaderID, "msg_other"), body: vectorBody, now: at},
		{name: "other timestamp within tolerance", secrets: []Secret{secret}, header: with(vectorHeader(vectorSignature), HeaderTimestamp, strconv.Itoa(vectorTimestamp+1)), body: vectorBody, now: at},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Verify(tt.secrets, tt.header, []byte(tt.body), tt.now, DefaultTolerance)
			if tt.ok && err != nil {
				t.Errorf("Verify: %v, want it verified", err)
			}
			if !tt.ok && !errors.Is(err, ErrVerify) {
				t.Errorf("Verify = %v, want ErrVerify", err)
			}
		})
	}
}

func without(h http.Header, key string) http.Header { h.Del(key); return h }

func with(h http.Header, key, value string) http.Header { h.Set(key, value); return h }

// During a rotation both secrets sign; a receiver that knows either one
// verifies, one that knows neither does not.
func TestSignRotation(t *testing.T) {
	t.Parallel()
	oldSecret, newSecret := NewSecret(), NewSecret()
	at := time.Date(2026, 11, 25, 15, 0, 0, 0, time.UTC)
	body := []byte(`{"type":"points.granted"}`)
	h := http.Header{}
	SetHeaders(h, []Secret{newSecret, oldSecret}, "01JDELIVERY", at, body)
	fields := strings.Fields(h.Get(HeaderSignature))
	if len(fields) != 2 || !strings.HasPrefix(fields[0], "v1,") || !strings.HasPrefix(fields[1], "v1,") || fields[0] == fields[1] {
		t.Fatalf("%s = %q, want two different v1 signatures", HeaderSignature, h.Get(HeaderSignature))
	}
	for name, s := range map[string]Secret{"old": oldSecret, "new": newSecret} {
		if err := Verify([]Secret{s}, h, body, at, DefaultTolerance); err != nil {
			t.Errorf("a receiver with the %s secret: %v", name, err)
		}
	}
	if err := Verify([]Secret{NewSecret()}, h, body, at, DefaultTolerance); err == nil {
		t.Error("a receiver with a third secret verified")
	}
}

func TestParseSecret(t *testing.T) {
	t.Parallel()
	b64 := func(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }
	tests := []struct {
		name string
		text string
		ok   bool
	}{
		{name: "the vector's (24 bytes)", text: vectorSecret, ok: true},
		{name: "64 bytes", text: "whsec_" + b64(64), ok: true},
		{name: "23 bytes", text: "whsec_" + b64(23)},
		{name: "65 bytes", text: "whsec_" + b64(65)},
		{name: "no prefix", text: strings.TrimPrefix(vectorSecret, "whsec_")},
		{name: "asymmetric prefix", text: "whsk_" + strings.TrimPrefix(vectorSecret, "whsec_")},
		{name: "not base64", text: "whsec_!!!!" + b64(30)},
		{name: "url-safe base64", text: "whsec_" + strings.ReplaceAll(strings.ReplaceAll(base64.StdEncoding.EncodeToString([]byte(strings.Repeat("\xfb\xff", 16))), "+", "-"), "/", "_")},
		{name: "empty", text: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := ParseSecret(tt.text)
			if tt.ok != (err == nil) {
				t.Fatalf("ParseSecret: %v, want ok %v", err, tt.ok)
			}
			if err != nil && len(tt.text) > 10 && strings.Contains(err.Error(), tt.text[6:]) {
				t.Errorf("the error quotes the secret: %v", err)
			}
			if tt.ok && s.Text() != tt.text {
				t.Errorf("Text() = %q, want %q back", s.Text(), tt.text)
			}
		})
	}
}

func TestNewSecret(t *testing.T) {
	t.Parallel()
	a, b := NewSecret(), NewSecret()
	if a.Text() == b.Text() {
		t.Error("two new secrets are equal")
	}
	parsed, err := ParseSecret(a.Text())
	if err != nil || parsed.Text() != a.Text() {
		t.Errorf("ParseSecret(NewSecret().Text()) = %v, %v", parsed, err)
	}
	if a.IsZero() || !(Secret{}).IsZero() {
		t.Error("IsZero is wrong")
	}
}

// However a secret is printed or logged, its key does not appear.
func TestSecretNeverPrints(t *testing.T) {
	t.Parallel()
	s := NewSecret()
	key := strings.TrimPrefix(s.Text(), SecretPrefix)
	var logged strings.Builder
	slog.New(slog.NewTextHandler(&logged, nil)).Info("endpoint", "secret", s, "secrets", []Secret{s})
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("endpoint", "secret", s)
	for _, out := range []string{
		fmt.Sprint(s), fmt.Sprintf("%v %+v %#v %s %q %x", s, s, s, s, s, s),
		fmt.Sprintf("%v %#v", []Secret{s}, struct{ S Secret }{s}), logged.String(),
	} {
		if strings.Contains(out, key) || strings.Contains(out, hex.EncodeToString(mustKey(t, s))) {
			t.Errorf("printed the secret: %s", out)
		}
	}
}

func mustKey(tb testing.TB, s Secret) []byte {
	tb.Helper()
	if len(s.key) == 0 {
		tb.Fatal("no key")
	}
	return s.key
}
