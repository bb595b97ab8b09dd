// Package dynamolocal starts and stops DynamoDB Local, the AWS emulator that
// development, the tests, the load test and the quick start run against.
//
// The emulator is fetched by `make dynamodb-local` (from the npm package
// amplify-dynamodb-simulator, checksum verified) into .cache/ at the root of
// the repository; LEDGER_DYNAMODB_LOCAL_DIR names another folder holding
// DynamoDBLocal.jar.
package dynamolocal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/pointledger/pointledger/internal/ddbhttp"
)

// RelDir is where `make dynamodb-local` unpacks the emulator, from the
// repository root. The Makefile names the same folder.
const RelDir = ".cache/dynamodb-local/emulator"

// Options say how to start the emulator. The zero value starts it in memory
// on a free port, from the folder FindDir finds.
type Options struct {
	Dir    string // folder with DynamoDBLocal.jar; "" = FindDir()
	Port   int    // 0 = a free port on this machine
	DBPath string // "" = -inMemory; else persist in this folder
	CPUs   string // "" = any CPU; else the CPUs it may run on, as taskset -c takes them (Linux)
	// JVMFlags are given to java before -jar (nil: the JVM's defaults, for
	// the best steady state); TestJVMFlags suit a run of a few minutes.
	JVMFlags []string
}

// TestJVMFlags make DynamoDB Local spend about half the CPU over the few
// minutes a test package runs it: C1 only (C2's compilations cost more than
// they save in that time) and the serial collector (no threads of its own).
// Measured side by side, 3000 purchases through the ledger: 24 s of the
// emulator's CPU with them, 45 s without (C1 alone 27 s); it starts in
// 1.9 s of CPU instead of 3.5 s.
var TestJVMFlags = []string{"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"}

// Emulator is a running DynamoDB Local.
type Emulator struct {
	Endpoint string // http://127.0.0.1:PORT
	Port     int

	cmd  *exec.Cmd
	out  *Output
	done chan struct{}
	err  error // how the process ended, valid after done
}

// FindDir returns the emulator folder: $LEDGER_DYNAMODB_LOCAL_DIR, or RelDir
// under the nearest folder above the working directory that has go.mod.
func FindDir() (string, error) {
	if d := os.Getenv("LEDGER_DYNAMODB_LOCAL_DIR"); d != "" {
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, RelDir), nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("no go.mod above the working directory; set LEDGER_DYNAMODB_LOCAL_DIR")
		}
	}
}

// Start starts the emulator and waits until it answers.
func Start(ctx context.Context, o Options) (*Emulator, error) {
	if o.Dir == "" {
		d, err := FindDir()
		if err != nil {
			return nil, err
		}
		o.Dir = d
	}
	if _, err := os.Stat(filepath.Join(o.Dir, "DynamoDBLocal.jar")); err != nil {
		return nil, fmt.Errorf("DynamoDB Local is not in %s (run `make dynamodb-local`): %w", o.Dir, err)
	}
	// A free port can be taken by someone else between our probe and the
	// emulator's bind (it refuses -port 0); try a few.
	var lastErr error
	for range 3 {
		port := o.Port
		if port == 0 {
			p, err := FreePort()
			if err != nil {
				return nil, err
			}
			port = p
		}
		e, err := start(ctx, o, port)
		if err == nil {
			return e, nil
		}
		lastErr = err
		if o.Port != 0 {
			break
		}
	}
	return nil, lastErr
}

func start(ctx context.Context, o Options, port int) (*Emulator, error) {
	args := append(slices.Clone(o.JVMFlags),
		"-Djava.library.path=DynamoDBLocal_lib",
		"-jar", "DynamoDBLocal.jar",
		"-port", strconv.Itoa(port),
		"-sharedDb", // one database whatever the credentials, so the AWS CLI sees the tables too
		"-disableTelemetry",
	)
	if o.DBPath != "" {
		args = append(args, "-dbPath", o.DBPath)
	} else {
		args = append(args, "-inMemory")
	}
	cmd := exec.Command("java", args...)
	if o.CPUs != "" {
		cmd = exec.Command("taskset", append([]string{"-c", o.CPUs, "java"}, args...)...) // taskset execs java: same process
	}
	cmd.Dir = o.Dir
	out := &Output{}
	cmd.Stdout, cmd.Stderr = out, out
	// The emulator dies with its parent, even when the parent is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start DynamoDB Local (is Java 11+ installed?): %w", err)
	}
	e := &Emulator{
		Endpoint: "http://127.0.0.1:" + strconv.Itoa(port),
		Port:     port,
		cmd:      cmd,
		out:      out,
		done:     make(chan struct{}),
	}
	go func() { e.err = cmd.Wait(); close(e.done) }()

	client := NewClient(e.Endpoint)
	deadline := time.Now().Add(60 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := client.ListTables(pctx, &dynamodb.ListTablesInput{Limit: aws.Int32(1)})
		cancel()
		if err == nil {
			return e, nil
		}
		select {
		case <-e.done:
			return nil, fmt.Errorf("DynamoDB Local exited on port %d: %w\n%s", port, e.err, out.String())
		case <-ctx.Done():
			e.Stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			e.Stop()
			return nil, fmt.Errorf("DynamoDB Local did not answer on port %d within 60s: %w\n%s", port, err, out.String())
		}
	}
}

// Stop kills the emulator and waits for it to exit.
func (e *Emulator) Stop() {
	if e.cmd.Process != nil {
		_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGKILL)
	}
	<-e.done
}

// Shutdown stops the emulator as an operator would, with SIGTERM, so that
// it closes its database (killed with SIGKILL, DynamoDB Local with -dbPath
// loses its last acknowledged write: measured, 299 of 300 transactions
// left). After 30 s it is killed all the same.
func (e *Emulator) Shutdown() {
	if e.cmd.Process != nil {
		_ = syscall.Kill(-e.cmd.Process.Pid, syscall.SIGTERM)
	}
	select {
	case <-e.done:
	case <-time.After(30 * time.Second):
		e.Stop()
	}
}

// Pid is the emulator's process id (the JVM's: taskset execs java), for
// reading what CPU it used.
func (e *Emulator) Pid() int { return e.cmd.Process.Pid }

// Output is what the emulator printed so far.
func (e *Emulator) Output() string { return e.out.String() }

// NewClient returns a DynamoDB client for an emulator endpoint, with the HTTP
// client ledgerd uses. The emulator accepts any credentials; these are fixed so
// that nothing looks for real ones.
func NewClient(endpoint string) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		HTTPClient:   ddbhttp.Client(),
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
		// DynamoDB Local's CRC32 header does not match its error bodies.
		DisableValidateResponseChecksum: true,
	}, func(o *dynamodb.Options) { o.HTTPClient = ddbhttp.OneWrite(o.HTTPClient) })
}

// NewStreamsClient returns a DynamoDB Streams client for an emulator endpoint.
func NewStreamsClient(endpoint string) *dynamodbstreams.Client {
	return dynamodbstreams.New(dynamodbstreams.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
	})
}

// FreePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Output collects a process's output (the emulator's, a ledgerd's in a
// test) while it runs and may be read meanwhile: os/exec copies into it on
// a goroutine of its own.
type Output struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Output) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Output) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
