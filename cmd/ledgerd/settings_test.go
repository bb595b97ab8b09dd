package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

// One way to bind a flag to its variable and default (issue 23): the flag
// wins over the variable, the variable over the default, an empty variable
// is unset, and a variable that does not parse is refused naming both.
func TestSettingsPrecedence(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		env   map[string]string
		args  []string
		wait  time.Duration
		limit int
		addr  string
		rate  float64
		on    bool
	}{
		{name: "defaults", wait: time.Second, limit: 25, addr: ":8080", rate: 0, on: true},
		{name: "variables", env: map[string]string{"LEDGER_WAIT": "2s", "LEDGER_LIMIT": "7", "LEDGER_ADDR": ":9", "LEDGER_RATE": "0.5", "LEDGER_ON": "false"},
			wait: 2 * time.Second, limit: 7, addr: ":9", rate: 0.5, on: false},
		{name: "flags over variables",
			env:  map[string]string{"LEDGER_WAIT": "2s", "LEDGER_LIMIT": "7", "LEDGER_ADDR": ":9", "LEDGER_RATE": "0.5", "LEDGER_ON": "false"},
			args: []string{"-wait", "3s", "-limit", "8", "-addr", ":10", "-rate", "2", "-on"},
			wait: 3 * time.Second, limit: 8, addr: ":10", rate: 2, on: true},
		{name: "an empty variable is unset", env: map[string]string{"LEDGER_WAIT": "", "LEDGER_ADDR": ""}, wait: time.Second, limit: 25, addr: ":8080", on: true},
		{name: "a switch is off with false only", env: map[string]string{"LEDGER_ON": "0"}, wait: time.Second, limit: 25, addr: ":8080", on: true},
		{name: "a flag alone", args: []string{"-on=false", "-limit", "1"}, wait: time.Second, limit: 1, addr: ":8080", on: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			s := newSettings(fs, func(name string) string { return tt.env[name] })
			var (
				wait  time.Duration
				limit int
				addr  string
				rate  float64
				on    bool
			)
			s.Duration(&wait, "wait", "LEDGER_WAIT", time.Second, "how long")
			s.Int(&limit, "limit", "LEDGER_LIMIT", 25, "how many")
			s.String(&addr, "addr", "LEDGER_ADDR", ":8080", "where")
			s.Float(&rate, "rate", "LEDGER_RATE", 0, "how often")
			s.Switch(&on, "on", "LEDGER_ON", "whether")
			if err := s.err(); err != nil {
				t.Fatal(err)
			}
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if wait != tt.wait || limit != tt.limit || addr != tt.addr || rate != tt.rate || on != tt.on {
				t.Errorf("got wait %v, limit %d, addr %q, rate %v, on %v; want %v, %d, %q, %v, %v",
					wait, limit, addr, rate, on, tt.wait, tt.limit, tt.addr, tt.rate, tt.on)
			}
			if u := fs.Lookup("limit").Usage; u != "how many (LEDGER_LIMIT)" {
				t.Errorf("usage %q, want it to name the variable", u)
			}
		})
	}
}

func TestSettingsNameTheVariableAndTheFlag(t *testing.T) {
	t.Parallel()
	env := map[string]string{"LEDGER_WAIT": "soon", "LEDGER_LIMIT": "many", "LEDGER_RATE": "fast"}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s := newSettings(fs, func(name string) string { return env[name] })
	var (
		wait  time.Duration
		limit int
		rate  float64
	)
	s.Duration(&wait, "wait", "LEDGER_WAIT", time.Second, "how long")
	s.Int(&limit, "limit", "LEDGER_LIMIT", 25, "how many")
	s.Float(&rate, "rate", "LEDGER_RATE", 0, "how often")
	err := s.err()
	if err == nil {
		t.Fatal("no error")
	}
	// Every bad variable at once, each with its flag.
	for _, want := range []string{`LEDGER_WAIT="soon" (-wait)`, `LEDGER_LIMIT="many" (-limit): not a whole number`, `LEDGER_RATE="fast" (-rate): not a number`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q, want it to say %q", err, want)
		}
	}
	// A bad flag is the flag package's to refuse.
	if err := fs.Parse([]string{"-limit", "some"}); err == nil || !strings.Contains(err.Error(), "-limit") {
		t.Errorf("-limit some: %v, want an error naming -limit", err)
	}
}

// A Bool is off by default, on by its variable (true, 1, ...) or its flag,
// and a variable that is not true or false is refused naming both.
func TestSettingsBool(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		env  string
		args []string
		want bool
	}{
		{"", nil, false},
		{"true", nil, true},
		{"1", nil, true},
		{"false", []string{"-allow"}, true},
		{"true", []string{"-allow=false"}, false},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var allow bool
		s := newSettings(fs, func(string) string { return tt.env })
		s.Bool(&allow, "allow", "LEDGER_ALLOW", "whether")
		if err := errorsOf(s, fs, tt.args); err != nil || allow != tt.want {
			t.Errorf("LEDGER_ALLOW=%q %v: %v, %v; want %v", tt.env, tt.args, allow, err, tt.want)
		}
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var allow bool
	s := newSettings(fs, func(string) string { return "yes" })
	s.Bool(&allow, "allow", "LEDGER_ALLOW", "whether")
	if err := s.err(); err == nil || !strings.Contains(err.Error(), `LEDGER_ALLOW="yes" (-allow): not true or false`) {
		t.Errorf("LEDGER_ALLOW=yes: %v, want it refused naming the variable and the flag", err)
	}
}

func errorsOf(s *settings, fs *flag.FlagSet, args []string) error {
	if err := s.err(); err != nil {
		return err
	}
	return fs.Parse(args)
}
