package webhook

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// SecretPrefix starts every secret as Standard Webhooks serializes it, so
// that a reader knows the scheme (HMAC-SHA256) from the secret alone.
const SecretPrefix = "whsec_"

// Standard Webhooks: a symmetric secret is random, 24 to 64 bytes.
const (
	minSecretBytes = 24
	maxSecretBytes = 64
	// newSecretBytes is what NewSecret draws: 256 bits, the size of the
	// HMAC-SHA256 block's useful key.
	newSecretBytes = 32
)

// Secret is an endpoint's signing key. It prints as a placeholder, never
// as itself, so that logging an endpoint or a delivery cannot leak it;
// Text is the one way to its serialization.
type Secret struct {
	key []byte
}

// NewSecret draws a secret from crypto/rand.
func NewSecret() Secret {
	key := make([]byte, newSecretBytes)
	// crypto/rand.Read never fails: on a broken system it crashes the
	// program rather than return predictable bytes.
	_, _ = rand.Read(key)
	return Secret{key: key}
}

// ParseSecret reads a secret as Text writes it: "whsec_" and the standard
// base64 of 24 to 64 bytes. The errors never quote the secret.
func ParseSecret(text string) (Secret, error) {
	encoded, ok := strings.CutPrefix(text, SecretPrefix)
	if !ok {
		return Secret{}, fmt.Errorf("parse secret: want the prefix %s", SecretPrefix)
	}
	key, err := base64.StdEncoding.Strict().DecodeString(encoded)
	if err != nil {
		return Secret{}, errors.New("parse secret: not standard base64 after the prefix")
	}
	if len(key) < minSecretBytes || len(key) > maxSecretBytes {
		return Secret{}, fmt.Errorf("parse secret: %d bytes, want %d to %d", len(key), minSecretBytes, maxSecretBytes)
	}
	return Secret{key: key}, nil
}

// Text is the secret serialized: shown to the endpoint's owner once, on
// creation or rotation, and stored; never logged.
func (s Secret) Text() string {
	return SecretPrefix + base64.StdEncoding.EncodeToString(s.key)
}

// IsZero says whether s is no secret at all (the zero Secret).
func (s Secret) IsZero() bool { return len(s.key) == 0 }

// String hides the secret from fmt, log and slog.
func (s Secret) String() string { return SecretPrefix + "[redacted]" }

// GoString hides the secret from %#v.
func (s Secret) GoString() string { return "webhook.Secret{" + s.String() + "}" }
