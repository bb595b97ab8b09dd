package main

import (
	"strings"
	"testing"
)

func TestPageTokenKey(t *testing.T) {
	t.Parallel()
	secret := strings.Repeat("ab", 32)
	tests := []struct {
		name    string
		key     string // LEDGER_PAGE_TOKEN_KEY
		prefix  string // of the tables
		wantErr bool
	}{
		{name: "none: derived from the table names", key: ""},
		{name: "none, another deployment", key: "", prefix: "prod-"},
		{name: "a secret", key: secret},
		{name: "not hex", key: "zz" + secret[2:], wantErr: true},
		{name: "too short", key: secret[:62], wantErr: true},
	}
	defaults, err := (&Config{}).pageTokens(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	derived := defaults.Encode(1, "ListEntries", "alice")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := &Config{TablePrefix: tt.prefix}
			getenv := func(name string) string {
				if name == "LEDGER_PAGE_TOKEN_KEY" {
					return tt.key
				}
				return ""
			}
			tokens, err := c.pageTokens(getenv)
			if tt.wantErr {
				if err == nil {
					t.Fatal("no error")
				}
				if strings.Contains(err.Error(), tt.key[:8]) {
					t.Errorf("the error quotes the key: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Only the default of the same tables takes the default's tokens.
			_, err = tokens.Decode(derived, "ListEntries", "alice")
			if same := tt.key == "" && tt.prefix == ""; (err == nil) != same {
				t.Errorf("a token of the default key: err = %v, want accepted %v", err, same)
			}
		})
	}
}
