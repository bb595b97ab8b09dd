package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/pointledger/pointledger/internal/api"
	"github.com/pointledger/pointledger/internal/ddbwire"
	"github.com/pointledger/pointledger/internal/dispatch"
	"github.com/pointledger/pointledger/internal/dynamolocal"
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

func TestHistoryWaitSetting(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		env     string // LEDGER_HISTORY_WAIT
		want    time.Duration
		wantErr bool
	}{
		{name: "default", want: api.DefaultHistoryWait},
		{name: "variable", env: "500ms", want: 500 * time.Millisecond},
		{name: "flag over variable", args: []string{"-history-wait", "1s"}, env: "500ms", want: time.Second},
		{name: "no wait", args: []string{"-history-wait", "0"}, want: 0},
		{name: "negative", args: []string{"-history-wait", "-1s"}, wantErr: true},
		{name: "past the bound", env: "31s", wantErr: true},
		{name: "not a duration", env: "soon", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			getenv := func(name string) string {
				if name == "LEDGER_HISTORY_WAIT" {
					return tt.env
				}
				return ""
			}
			c, err := serveFlags(tt.args, getenv, io.Discard)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("history wait %v: no error", c.historyWait)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.historyWait != tt.want {
				t.Errorf("history wait = %v, want %v", c.historyWait, tt.want)
			}
		})
	}
}

// TestWebhookRetryDelaysSetting: -webhook-retry-delays (serve and
// dispatch read it alike) is the dispatcher's schedule, its default
// dispatch.DefaultSchedule; a list the dispatcher could not follow stops
// the command.
func TestWebhookRetryDelaysSetting(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	tests := []struct {
		name    string
		args    []string
		env     string // LEDGER_WEBHOOK_RETRY_DELAYS
		want    []time.Duration
		wantErr bool
	}{
		{name: "default", want: dispatch.DefaultSchedule.Delays},
		{name: "variable", env: "100ms,200ms,400ms", want: []time.Duration{100 * ms, 200 * ms, 400 * ms}},
		{name: "flag over variable", args: []string{"-webhook-retry-delays", "1s, 1m"}, env: "100ms", want: []time.Duration{time.Second, time.Minute}},
		{name: "one delay", env: "30s", want: []time.Duration{30 * time.Second}},
		{name: "zero", env: "1s,0s", wantErr: true},
		{name: "negative", args: []string{"-webhook-retry-delays", "-1s"}, wantErr: true},
		{name: "an empty part", env: "1s,,2s", wantErr: true},
		{name: "days are not a Go duration", env: "1d", wantErr: true},
		{name: "not a duration", env: "soon", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			getenv := func(name string) string {
				if name == "LEDGER_WEBHOOK_RETRY_DELAYS" {
					return tt.env
				}
				return ""
			}
			c, err := serveFlags(tt.args, getenv, io.Discard)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), "LEDGER_WEBHOOK_RETRY_DELAYS") {
					t.Fatalf("delays %v: error %v, want one naming the setting", c.delivery.schedule.Delays, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.delivery.schedule; !slices.Equal(got.Delays, tt.want) || got.Jitter != dispatch.DefaultSchedule.Jitter {
				t.Errorf("schedule = %v ±%v, want %v ±%v", got.Delays, got.Jitter, tt.want, dispatch.DefaultSchedule.Jitter)
			}
		})
	}
}

// TestClaimOutlastsAnAttempt: a dispatcher's claim on a queue holds
// -webhook-attempt-timeout and 30 s, so that no other dispatcher sends an
// event again while an attempt of it is under way, however long attempts
// may take (dispatch's own default, 45 s, was shorter than an attempt of
// more than 45 s); a killed dispatcher's queues wait that long.
func TestClaimOutlastsAnAttempt(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		timeout string // LEDGER_WEBHOOK_ATTEMPT_TIMEOUT
		want    time.Duration
	}{
		{timeout: "", want: 45 * time.Second},
		{timeout: "0s", want: 45 * time.Second}, // the Sender's default attempt
		{timeout: "1s", want: 31 * time.Second},
		{timeout: "2m", want: 150 * time.Second},
	} {
		getenv := func(name string) string {
			if name == "LEDGER_WEBHOOK_ATTEMPT_TIMEOUT" {
				return tt.timeout
			}
			return ""
		}
		c, err := serveFlags(nil, getenv, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.delivery.claimTTL(); got != tt.want {
			t.Errorf("attempt timeout %q: claims hold %v, want %v", tt.timeout, got, tt.want)
		}
	}
}

// TestNoticeIntervalSetting: -notice-interval (LEDGER_NOTICE_INTERVAL) is
// the finder's interval, 5 minutes by default (issue 31: it was fixed); a
// lead shorter than it, which a bucket could cross between two passes, is
// refused.
func TestNoticeIntervalSetting(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    time.Duration
		wantErr string
	}{
		{name: "default", want: 5 * time.Minute},
		{name: "variable", env: map[string]string{"LEDGER_NOTICE_INTERVAL": "30s"}, want: 30 * time.Second},
		{name: "flag over variable", args: []string{"-notice-interval", "1m"}, env: map[string]string{"LEDGER_NOTICE_INTERVAL": "30s"}, want: time.Minute},
		{name: "zero", args: []string{"-notice-interval", "0s"}, wantErr: "LEDGER_NOTICE_INTERVAL"},
		{name: "not a duration", env: map[string]string{"LEDGER_NOTICE_INTERVAL": "soon"}, wantErr: "LEDGER_NOTICE_INTERVAL"},
		{name: "a lead shorter than the interval", env: map[string]string{"LEDGER_NOTICE_LEADS": "2m", "LEDGER_NOTICE_INTERVAL": "5m"}, wantErr: "shorter than -notice-interval"},
		{name: "no notices: any interval", env: map[string]string{"LEDGER_NOTICE_LEADS": "off", "LEDGER_NOTICE_INTERVAL": "1h"}, want: time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := serveFlags(tt.args, func(name string) string { return tt.env[name] }, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("interval %v: error %v, want one saying %q", c.delivery.noticeInterval, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.delivery.noticeInterval != tt.want {
				t.Errorf("interval = %v, want %v", c.delivery.noticeInterval, tt.want)
			}
		})
	}
}

// The flag's default is written from dispatch.DefaultSchedule, and reads
// back as it; every delay as short as an operator writes it.
func TestRetryDelaysAreWrittenAsParsed(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		delays []time.Duration
		want   string
	}{
		{[]time.Duration{5 * time.Second, 5 * time.Minute, 2 * time.Hour, 24 * time.Hour}, "5s,5m,2h,24h"},
		{[]time.Duration{90 * time.Second, 90 * time.Minute, 500 * time.Millisecond, 10 * time.Second}, "1m30s,1h30m,500ms,10s"},
		{[]time.Duration{time.Hour + time.Second}, "1h0m1s"},
	} {
		if got := formatRetryDelays(tt.delays); got != tt.want {
			t.Errorf("formatRetryDelays(%v) = %q, want %q", tt.delays, got, tt.want)
		}
	}
	s, err := parseRetryDelays(defaultRetryDelays)
	if err != nil || !slices.Equal(s.Delays, dispatch.DefaultSchedule.Delays) {
		t.Errorf("the default %q reads as %v, %v; want %v", defaultRetryDelays, s.Delays, err, dispatch.DefaultSchedule.Delays)
	}
}

// TestLeanWritesSetting: the store's TransactWriteItems go through ddbwire
// by default, to the configured endpoint, over ddbwire's own connections,
// and through the SDK client with -lean-writes=false or
// LEDGER_LEAN_WRITES=false; through the SDK's HTTP client with
// -lean-conns=false or LEDGER_LEAN_CONNS=false.
func TestLeanWritesSetting(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		args     []string
		env      string // LEDGER_LEAN_WRITES
		connsEnv string // LEDGER_LEAN_CONNS
		lean     bool
		ownConns bool
	}{
		{name: "default", lean: true, ownConns: true},
		{name: "variable off", env: "false"},
		{name: "flag off", args: []string{"-lean-writes=false"}},
		{name: "flag on, variable off", args: []string{"-lean-writes=true"}, env: "false", lean: true, ownConns: true},
		{name: "conns flag off", args: []string{"-lean-conns=false"}, lean: true},
		{name: "conns variable off", connsEnv: "false", lean: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			getenv := func(name string) string {
				switch name {
				case "LEDGER_LEAN_WRITES":
					return tt.env
				case "LEDGER_LEAN_CONNS":
					return tt.connsEnv
				}
				return ""
			}
			c, err := serveFlags(tt.args, getenv, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			api, err := c.storeAPI(t.Context(), dynamolocal.NewClient("http://127.0.0.1:8123"))
			if err != nil {
				t.Fatal(err)
			}
			switch api := api.(type) {
			case *ddbwire.Client:
				if !tt.lean || api.Endpoint() != "http://127.0.0.1:8123/" {
					t.Errorf("ddbwire to %s, want lean %v to http://127.0.0.1:8123/", api.Endpoint(), tt.lean)
				}
				if api.OwnConns() != tt.ownConns {
					t.Errorf("ddbwire's own connections %v, want %v", api.OwnConns(), tt.ownConns)
				}
			case *dynamodb.Client:
				if tt.lean {
					t.Error("the SDK client, want ddbwire")
				}
			default:
				t.Errorf("%T", api)
			}
		})
	}
}
