package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// MaxRequestBytes bounds a request message; the largest valid one is a few KiB.
const MaxRequestBytes = 64 << 10

// HandlerOptions are the options every service handler of ledgerd is built
// with: snake_case JSON, the request size bound, request logging.
func HandlerOptions(log *slog.Logger) []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCodec(jsonCodec{name: "json"}),
		connect.WithCodec(jsonCodec{name: "json; charset=utf-8"}),
		connect.WithCodec(protoCodec{}),
		connect.WithReadMaxBytes(MaxRequestBytes),
		// Answers are a few hundred bytes: gzipping them cost ledgerd 5% of
		// its CPU under load (and the client as much to inflate) for
		// nothing. Long history pages are still compressed.
		connect.WithCompressMinBytes(compressMinBytes),
		// A malformed request is logged like any other refusal, and refused
		// before an interceptor that comes after reads it (authentication's
		// user_id, affinity's forwarding).
		connect.WithInterceptors(LogRequests(log), refuseMalformed{}),
	}
}

// compressMinBytes: answers shorter than this go uncompressed.
const compressMinBytes = 2048

// jsonCodec writes JSON with the proto field names (user_id, balance_after),
// the names used everywhere else: in requests, in DynamoDB, in logs. It
// rejects unknown fields, so a misspelt field is an error, not a default.
// A body it cannot read is marked malformed, and refused with a message
// for the caller (malformed.go).
//
// Answers carry every field, zero values included (a new user's "version":
// "0", "replayed": false, "holds": []), so that a client reads the same
// shape whatever the values, and need not know proto3's rule that a zero is
// left out. That is EmitDefaultValues, not EmitUnpopulated: both emit every
// scalar, list and map, but EmitUnpopulated also writes null for a message
// field that is not set, and here those are timestamps whose absence is
// the value (no expire_time: the points never expire). null would be a
// second spelling of it that every client would have to type as nullable;
// EmitDefaultValues leaves such a field out, as the C++ and Java
// libraries' "always print fields with no presence" and connect-es's
// alwaysEmitImplicit do, so clients built on them read the same JSON.
type jsonCodec struct{ name string }

func (c jsonCodec) Name() string { return c.name }

func (c jsonCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("json codec: %T is not a proto.Message", v)
	}
	b, err := protojson.MarshalOptions{UseProtoNames: true, EmitDefaultValues: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	// protojson puts a space after some commas and colons, deliberately at
	// random (per build, so that nobody depends on its spacing); answers
	// are compact, the same bytes from every build, as the README shows.
	var compact bytes.Buffer
	compact.Grow(len(b))
	if err := json.Compact(&compact, b); err != nil {
		return nil, fmt.Errorf("json codec: compact: %w", err)
	}
	return compact.Bytes(), nil
}

func (c jsonCodec) Unmarshal(b []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("json codec: %T is not a proto.Message", v)
	}
	if err := protojson.Unmarshal(b, m); err != nil {
		markMalformed(m, describeJSONError(m, b, err))
	}
	return nil
}

// protoCodec is connect-go's codec of the protobuf binary encoding
// (Connect's application/proto, gRPC and gRPC-Web), but for its errors:
// a body that does not decode is marked malformed, as jsonCodec does.
type protoCodec struct{}

func (protoCodec) Name() string { return "proto" }

func (protoCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("proto codec: %T is not a proto.Message", v)
	}
	return proto.Marshal(m)
}

// MarshalAppend is Marshal appended to dst: Connect then marshals an answer
// into a buffer of its pool, not into a new slice each (issue 37).
func (protoCodec) MarshalAppend(dst []byte, v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("proto codec: %T is not a proto.Message", v)
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, m)
}

func (protoCodec) Unmarshal(b []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("proto codec: %T is not a proto.Message", v)
	}
	if err := proto.Unmarshal(b, m); err != nil {
		markMalformed(m, describeProtoError(m, err))
	}
	return nil
}
