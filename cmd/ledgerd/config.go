package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/pointledger/pointledger/migrations"
)

// Config is what ledgerd is told by flags and LEDGER_* environment variables
// (a flag wins over its variable).
type Config struct {
	ListenAddr      string
	Endpoint        string
	Region          string
	TablePrefix     string
	AmountScale     int
	LogLevel        string
	LogFormat       string
	ShutdownTimeout time.Duration
}

// flags registers the options shared by the commands that talk to DynamoDB.
func (c *Config) flags(fs *flag.FlagSet, getenv func(string) string) {
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	fs.StringVar(&c.Endpoint, "dynamodb-endpoint", env("LEDGER_DYNAMODB_ENDPOINT", ""),
		"DynamoDB endpoint URL, e.g. http://localhost:8000 for DynamoDB Local; empty: the AWS endpoint of the region (LEDGER_DYNAMODB_ENDPOINT)")
	fs.StringVar(&c.Region, "region", env("LEDGER_REGION", ""),
		"AWS region; empty: from the AWS environment, else us-east-1 (LEDGER_REGION)")
	fs.StringVar(&c.TablePrefix, "table-prefix", env("LEDGER_TABLE_PREFIX", ""),
		"prefix of the table names, e.g. prod- (LEDGER_TABLE_PREFIX)")
	fs.StringVar(&c.LogLevel, "log-level", env("LEDGER_LOG_LEVEL", "info"), "debug, info, warn or error (LEDGER_LOG_LEVEL)")
	fs.StringVar(&c.LogFormat, "log-format", env("LEDGER_LOG_FORMAT", "json"), "json or text (LEDGER_LOG_FORMAT)")
}

func (c *Config) ledgerTable() string { return c.TablePrefix + migrations.LedgerTable }

func (c *Config) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", c.LogLevel, err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(c.LogFormat) {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: want json or text", c.LogFormat)
}

// dynamoClient builds the DynamoDB client from the AWS environment (region,
// credentials), pointed at Endpoint when one is set. An emulator needs no real
// credentials, so with an endpoint and none in the environment it gets fixed
// local ones.
func (c *Config) dynamoClient(ctx context.Context, getenv func(string) string) (*dynamodb.Client, error) {
	httpClient := awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		// Many concurrent requests go to one host: keep their connections.
		t.MaxIdleConns = 1024
		t.MaxIdleConnsPerHost = 1024
	})
	opts := []func(*config.LoadOptions) error{config.WithHTTPClient(httpClient)}
	if c.Region != "" {
		opts = append(opts, config.WithRegion(c.Region))
	}
	if c.Endpoint != "" && getenv("AWS_ACCESS_KEY_ID") == "" && getenv("AWS_PROFILE") == "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	return dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
			// DynamoDB Local's CRC32 header does not match its error bodies;
			// TLS guards the real service's responses anyway.
			o.DisableValidateResponseChecksum = true
		}
	}), nil
}

func intFromEnv(getenv func(string) string, name string, def int) (int, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: not a whole number", name, v)
	}
	return n, nil
}

func durationFromEnv(getenv func(string) string, name string, def time.Duration) (time.Duration, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %w", name, v, err)
	}
	return d, nil
}

func validScale(n int) error {
	if n < 0 || n > 8 {
		return fmt.Errorf("amount scale %d: want 0 to 8", n)
	}
	return nil
}
