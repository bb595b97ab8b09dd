package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"
)

// settings registers a command's flags, each bound to its LEDGER_*
// environment variable and its default in one call, so that every setting
// follows the same rules: a flag on the command line wins over its
// variable, a variable over the default, and an empty variable counts as
// unset. A variable's value becomes the flag's default, so -h shows what
// the command would run with. A value that does not parse is refused with
// the names of the flag and the variable; the flag package refuses a bad
// flag itself, naming the flag, and the usage names the variable.
//
// What each value may be (ranges, settings that go together) is checked
// where the value is used, for the flag and the variable alike.
type settings struct {
	fs     *flag.FlagSet
	getenv func(string) string
	errs   []error
}

func newSettings(fs *flag.FlagSet, getenv func(string) string) *settings {
	return &settings{fs: fs, getenv: getenv}
}

// err is every variable that did not parse, or nil.
func (s *settings) err() error { return errors.Join(s.errs...) }

// String registers -name, bound to env, with default def.
func (s *settings) String(p *string, name, env, def, usage string) {
	s.fs.StringVar(p, name, fromEnv(s, name, env, def, func(v string) (string, error) { return v, nil }), withVariable(usage, env))
}

// Int registers -name, a whole number, bound to env, with default def.
func (s *settings) Int(p *int, name, env string, def int, usage string) {
	s.fs.IntVar(p, name, fromEnv(s, name, env, def, parseInt), withVariable(usage, env))
}

// Float registers -name, a number, bound to env, with default def.
func (s *settings) Float(p *float64, name, env string, def float64, usage string) {
	s.fs.Float64Var(p, name, fromEnv(s, name, env, def, parseFloat), withVariable(usage, env))
}

// Duration registers -name, a duration (1m30s), bound to env, with default
// def.
func (s *settings) Duration(p *time.Duration, name, env string, def time.Duration, usage string) {
	s.fs.DurationVar(p, name, fromEnv(s, name, env, def, time.ParseDuration), withVariable(usage, env))
}

// Bool registers -name, off by default, bound to env: true or false
// (strconv.ParseBool's spellings).
func (s *settings) Bool(p *bool, name, env, usage string) {
	s.fs.BoolVar(p, name, fromEnv(s, name, env, false, parseBool), withVariable(usage, env))
}

// Switch registers -name, on by default; its variable turns it off with the
// value false only, so that a typo in a deployment's environment leaves on
// what runs by default (the projector, the sweeper).
func (s *settings) Switch(p *bool, name, env, usage string) {
	s.fs.BoolVar(p, name, s.getenv(env) != "false", withVariable(usage, env))
}

// fromEnv is env's value, parsed, or def when env is unset. A value that
// does not parse is kept as an error naming the flag and the variable, and
// the flag gets def meanwhile.
func fromEnv[T any](s *settings, name, env string, def T, parse func(string) (T, error)) T {
	v := s.getenv(env)
	if v == "" {
		return def
	}
	x, err := parse(v)
	if err != nil {
		s.errs = append(s.errs, fmt.Errorf("%s=%q (-%s): %w", env, v, name, err))
		return def
	}
	return x
}

func withVariable(usage, env string) string { return usage + " (" + env + ")" }

func parseInt(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, errors.New("not a whole number")
	}
	return n, nil
}

func parseBool(v string) (bool, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errors.New("not true or false")
	}
	return b, nil
}

func parseFloat(v string) (float64, error) {
	x, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, errors.New("not a number")
	}
	return x, nil
}
