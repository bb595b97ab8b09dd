package auth

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Credentials is the credentials file (JSON): the keys that sign user tokens
// and the hashes of the service, admin and peer tokens. It holds no token itself.
//
//	{
//	  "issuer": "pointledger",
//	  "audience": "pointledger",
//	  "user_token_keys": ["<base64 of at least 32 random bytes>"],
//	  "tokens": [{"name": "checkout", "role": "service", "sha256": "<hex>"}]
//	}
//
// The first user token key signs (`ledgerd token`); every key verifies, so a
// key is rotated by adding a new one in front and removing the old one once
// its tokens have expired.
type Credentials struct {
	Issuer        string        `json:"issuer"`
	Audience      string        `json:"audience"`
	UserTokenKeys []string      `json:"user_token_keys,omitempty"`
	Tokens        []OpaqueToken `json:"tokens,omitempty"`
}

// OpaqueToken is a service, admin or peer token, known by its SHA-256 only.
type OpaqueToken struct {
	Name   string `json:"name"`
	Role   Role   `json:"role"`
	SHA256 string `json:"sha256"`
}

// MinKeyBytes is the least length of a user token signing key.
const MinKeyBytes = 32

// LoadCredentials reads and checks a credentials file.
func LoadCredentials(path string) (*Credentials, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	c, err := ParseCredentials(b)
	if err != nil {
		return nil, fmt.Errorf("credentials %s: %w", path, err)
	}
	return c, nil
}

// ParseCredentials parses and checks credentials JSON; unknown fields are
// errors, so a misspelt field does not silently drop a key.
func ParseCredentials(b []byte) (*Credentials, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var c Credentials
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *Credentials) check() error {
	if c.Issuer == "" || c.Audience == "" {
		return errors.New("issuer and audience are required")
	}
	if len(c.UserTokenKeys) == 0 && len(c.Tokens) == 0 {
		return errors.New("no user_token_keys and no tokens: nobody could call")
	}
	for i := range c.UserTokenKeys {
		if _, err := c.key(i); err != nil {
			return err
		}
	}
	names := map[string]bool{}
	for _, t := range c.Tokens {
		if t.Role != RoleService && t.Role != RoleAdmin && t.Role != RolePeer && t.Role != RoleSupport {
			return fmt.Errorf("token %q: role %q: want service, admin, support or peer (user tokens are signed, not listed)", t.Name, t.Role)
		}
		if t.Name == "" || names[t.Name] {
			return fmt.Errorf("token %q: every token needs a name of its own", t.Name)
		}
		names[t.Name] = true
		if h, err := hex.DecodeString(t.SHA256); err != nil || len(h) != sha256.Size {
			return fmt.Errorf("token %q: sha256 must be 64 hex digits", t.Name)
		}
	}
	return nil
}

func (c *Credentials) key(i int) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(c.UserTokenKeys[i])
	if err != nil {
		return nil, fmt.Errorf("user_token_keys[%d]: not base64: %w", i, err)
	}
	if len(k) < MinKeyBytes {
		return nil, fmt.Errorf("user_token_keys[%d]: %d bytes, want at least %d", i, len(k), MinKeyBytes)
	}
	return k, nil
}

// NewSecret returns a fresh random opaque token: 32 random bytes, base64url.
func NewSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return "plt_" + base64.RawURLEncoding.EncodeToString(b)
}

// NewKey returns a fresh random user token signing key, base64.
func NewKey() string {
	b := make([]byte, MinKeyBytes)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// HashToken is how an opaque token is stored: hex SHA-256.
func HashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// DevCredentials are freshly generated credentials for local development and
// tests, with their service, admin and peer tokens in the clear.
type DevCredentials struct {
	Credentials  *Credentials
	ServiceToken string
	AdminToken   string
	// PeerToken is what the instances of one deployment send each other
	// (LEDGER_PEER_TOKEN); "" in a folder written before peers existed.
	PeerToken string
	// SupportToken signs in to the console as a support operator
	// ("dev-support"); "" in a folder written before the role existed.
	SupportToken string
}

// GenerateDev makes credentials with one signing key, one service token
// ("dev-service"), one admin token ("dev-admin"), one support token
// ("dev-support") and one peer token ("dev-peer").
func GenerateDev() DevCredentials {
	d := DevCredentials{ServiceToken: NewSecret(), AdminToken: NewSecret()}
	d.Credentials = &Credentials{
		Issuer:        "pointledger",
		Audience:      "pointledger",
		UserTokenKeys: []string{NewKey()},
		Tokens: []OpaqueToken{
			{Name: "dev-service", Role: RoleService, SHA256: HashToken(d.ServiceToken)},
			{Name: "dev-admin", Role: RoleAdmin, SHA256: HashToken(d.AdminToken)},
		},
	}
	d.AddPeer()
	d.AddSupport()
	return d
}

// AddSupport gives d a new support token ("dev-support", in place of one it
// has), for credentials made before there was a support role.
func (d *DevCredentials) AddSupport() {
	const name = "dev-support"
	d.SupportToken = NewSecret()
	d.Credentials.Tokens = slices.DeleteFunc(d.Credentials.Tokens, func(t OpaqueToken) bool { return t.Name == name })
	d.Credentials.Tokens = append(d.Credentials.Tokens, OpaqueToken{Name: name, Role: RoleSupport, SHA256: HashToken(d.SupportToken)})
}

// AddPeer gives d a new peer token ("dev-peer", in place of one it has),
// for credentials made before there were peers.
func (d *DevCredentials) AddPeer() {
	const name = "dev-peer"
	d.PeerToken = NewSecret()
	d.Credentials.Tokens = slices.DeleteFunc(d.Credentials.Tokens, func(t OpaqueToken) bool { return t.Name == name })
	d.Credentials.Tokens = append(d.Credentials.Tokens, OpaqueToken{Name: name, Role: RolePeer, SHA256: HashToken(d.PeerToken)})
}

// JSON is the credentials file's content.
func (c *Credentials) JSON() []byte {
	b, _ := json.MarshalIndent(c, "", "  ")
	return append(b, '\n')
}

// Files of a development credentials folder (WriteDir, ReadDevDir).
const (
	DevCredentialsFile  = "credentials.json"
	DevServiceTokenFile = "service.token"
	DevAdminTokenFile   = "admin.token"
	DevPeerTokenFile    = "peer.token"
	DevSupportTokenFile = "support.token"
)

// WriteDir writes d into dir (created, private): the credentials file and
// the service, admin and peer tokens, one file each. It returns the credentials
// file's path.
func (d DevCredentials) WriteDir(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	files := map[string][]byte{
		DevCredentialsFile:  d.Credentials.JSON(),
		DevServiceTokenFile: []byte(d.ServiceToken + "\n"),
		DevAdminTokenFile:   []byte(d.AdminToken + "\n"),
	}
	if d.PeerToken != "" {
		files[DevPeerTokenFile] = []byte(d.PeerToken + "\n")
	}
	if d.SupportToken != "" {
		files[DevSupportTokenFile] = []byte(d.SupportToken + "\n")
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return "", err
		}
	}
	return filepath.Join(dir, DevCredentialsFile), nil
}

// ReadDevDir reads what WriteDir wrote. A folder written before peers (or
// the support role) existed has no peer (support) token: PeerToken
// (SupportToken) is "" (see AddPeer, AddSupport).
func ReadDevDir(dir string) (DevCredentials, error) {
	var d DevCredentials
	c, err := LoadCredentials(filepath.Join(dir, DevCredentialsFile))
	if err != nil {
		return d, err
	}
	d.Credentials = c
	for name, to := range map[string]*string{DevServiceTokenFile: &d.ServiceToken, DevAdminTokenFile: &d.AdminToken} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return d, err
		}
		*to = strings.TrimSpace(string(b))
	}
	for name, to := range map[string]*string{DevPeerTokenFile: &d.PeerToken, DevSupportTokenFile: &d.SupportToken} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		switch {
		case err == nil:
			*to = strings.TrimSpace(string(b))
		case !errors.Is(err, fs.ErrNotExist):
			return d, err
		}
	}
	return d, nil
}
