package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"
)

// expireCmd runs the expiry sweeper until stopped, or once with -once,
// printing what each pass did.
func expireCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c Config
	fs := flag.NewFlagSet("expire", flag.ContinueOnError)
	fs.SetOutput(stderr)
	once := fs.Bool("once", false, "sweep every shard once, print what was done, and exit")
	settings := newSettings(fs, getenv)
	var interval time.Duration
	settings.Duration(&interval, "sweep-interval", "LEDGER_SWEEP_INTERVAL", 15*time.Second, "time between passes")
	if err := errors.Join(settings.err(), c.flags(fs, getenv)); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := c.logger(stderr)
	if err != nil {
		return err
	}
	parts, err := c.parts(ctx, getenv, log)
	if err != nil {
		return err
	}
	s := c.newSweeper(parts, interval, log)
	if !*once {
		log.Info("sweeping expired points", "version", version, "interval", interval, "table_prefix", c.TablePrefix)
		return s.Run(ctx)
	}
	p, err := s.Pass(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, p)
	return nil
}
