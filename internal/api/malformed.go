package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// A request body the codec cannot read is refused invalid_argument with
// reason MALFORMED_REQUEST and a message written for the caller, in every
// protocol. connect-go cannot be told so by the codec: it wraps a codec's
// error in a fresh invalid_argument, "unmarshal message: " and the
// parser's words, without details, and before any interceptor runs. So
// the codec does not fail: it empties the message and marks it malformed
// (markMalformed), and the first interceptor after logging
// (refuseMalformed, in HandlerOptions) refuses a marked message before
// anything reads it. The codecs and the interceptor go together: both are
// set in HandlerOptions only, and a handler built with the codecs but
// without the interceptor would take a malformed request for an empty one.

// malformedField is the field number of the mark, the largest there is:
// no message of ours declares it.
const malformedField protowire.Number = protowire.MaxValidNumber

// malformedKey starts every mark, so that a binary request that carries
// field malformedField itself (an unknown field, which proto keeps) is not
// taken for one: only this process knows the key.
var malformedKey = func() []byte {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return b
}()

// markMalformed empties m and marks it malformed, with the message the
// caller will get.
func markMalformed(m proto.Message, message string) {
	proto.Reset(m)
	b := protowire.AppendTag(nil, malformedField, protowire.BytesType)
	b = protowire.AppendBytes(b, append(append([]byte(nil), malformedKey...), message...))
	m.ProtoReflect().SetUnknown(b)
}

// malformedMessage is the message of a request marked malformed, if msg is
// one.
func malformedMessage(msg any) (string, bool) {
	m, ok := msg.(proto.Message)
	if !ok {
		return "", false
	}
	raw := m.ProtoReflect().GetUnknown()
	if len(raw) == 0 {
		return "", false
	}
	num, typ, n := protowire.ConsumeTag(raw)
	if n < 0 || num != malformedField || typ != protowire.BytesType {
		return "", false
	}
	v, n := protowire.ConsumeBytes(raw[n:])
	if n < 0 || !bytes.HasPrefix(v, malformedKey) {
		return "", false
	}
	return string(v[len(malformedKey):]), true
}

func malformedError(message string) *connect.Error {
	return withReason(connect.NewError(connect.CodeInvalidArgument, errors.New(message)), ReasonMalformedRequest)
}

// refuseMalformed refuses the requests the codec marked malformed.
type refuseMalformed struct{}

func (refuseMalformed) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if message, ok := malformedMessage(req.Any()); ok {
			return nil, malformedError(message)
		}
		return next(ctx, req)
	}
}

func (refuseMalformed) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (refuseMalformed) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(ctx, malformedConn{conn})
	}
}

// malformedConn refuses a marked message as it is received.
type malformedConn struct{ connect.StreamingHandlerConn }

func (c malformedConn) Receive(msg any) error {
	if err := c.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	if message, ok := malformedMessage(msg); ok {
		return malformedError(message)
	}
	return nil
}

// protojsonError is how protojson words an error: "proto:", a space that
// is at random a no-break space, "syntax error" for broken JSON, and the
// position.
var protojsonError = regexp.MustCompile(`^proto:[\s\x{a0}]*(?:syntax error[\s\x{a0}]*)?(?:\(line (\d+):(\d+)\):[\s\x{a0}]*)?`)

// wrongType is protojson's "invalid value for int64 field minVersion: "abc"".
var wrongType = regexp.MustCompile(`^invalid value for (\w+) field (\w+): (.*)$`)

// jsonKinds say in the caller's words what a field of a kind takes.
var jsonKinds = map[string]string{
	"string": "a string", "bool": "true or false", "bytes": "a base64 string",
	"int32": "an integer", "sint32": "an integer", "sfixed32": "an integer", "uint32": "an integer", "fixed32": "an integer",
	"int64": "an integer", "sint64": "an integer", "sfixed64": "an integer", "uint64": "an integer", "fixed64": "an integer",
	"float": "a number", "double": "a number", "enum": "the name of one of its values",
}

// describeJSONError words err, protojson's error reading body into m, for
// the caller: what the message is, the parser's finding in terms of the
// request's fields, and where.
func describeJSONError(m proto.Message, body []byte, err error) string {
	name := m.ProtoReflect().Descriptor().FullName()
	if len(bytes.TrimSpace(body)) == 0 {
		return fmt.Sprintf("request body is empty: %s is a JSON object ({} if no field is set)", name)
	}
	text := err.Error()
	where := ""
	offset := int64(-1)
	if loc := protojsonError.FindStringSubmatchIndex(text); loc != nil {
		if loc[2] >= 0 {
			line, column := text[loc[2]:loc[3]], text[loc[4]:loc[5]]
			where = fmt.Sprintf(" (line %s, column %s)", line, column)
			l, _ := strconv.Atoi(line)
			c, _ := strconv.Atoi(column)
			offset = offsetOf(body, l, c)
		}
		text = text[loc[1]:]
	}
	wrongValue := strings.HasPrefix(text, "unexpected token ") || wrongType.MatchString(text) ||
		strings.HasPrefix(text, "invalid google.protobuf.")
	if path, token, ok := fieldAt(body, offset); ok && wrongValue {
		if field, form, ok := fieldForm(m.ProtoReflect().Descriptor(), path); ok {
			if len(token) > 40 {
				token = token[:40] + "…"
			}
			return fmt.Sprintf("request body is not valid JSON for %s: field %q must be %s, not %s%s", name, field, form, token, where)
		}
	}
	switch {
	case text == "unexpected EOF":
		text = "the JSON ends before the object does"
	case wrongType.MatchString(text):
		p := wrongType.FindStringSubmatch(text)
		kind, ok := jsonKinds[p[1]]
		if !ok {
			kind = "an object"
		}
		text = fmt.Sprintf("field %q must be %s, not %s", protoFieldName(m.ProtoReflect().Descriptor(), p[2]), kind, p[3])
	case strings.HasPrefix(text, "invalid google.protobuf.Timestamp value "):
		text = "invalid time " + strings.TrimPrefix(text, "invalid google.protobuf.Timestamp value ") + `: write RFC 3339 in UTC, e.g. "2026-01-02T15:04:05Z"`
	case strings.HasPrefix(text, "invalid google.protobuf.Duration value "):
		text = "invalid duration " + strings.TrimPrefix(text, "invalid google.protobuf.Duration value ") + `: write seconds with an s, e.g. "3600s"`
	}
	return fmt.Sprintf("request body is not valid JSON for %s: %s%s", name, text, where)
}

// describeProtoError words err, proto's error reading a binary body into
// m, for the caller.
func describeProtoError(m proto.Message, err error) string {
	what := "not the protobuf binary encoding of"
	if strings.Contains(err.Error(), "invalid UTF-8") {
		what = "a string that is not valid UTF-8 in"
	}
	return fmt.Sprintf("request body is %s %s", what, m.ProtoReflect().Descriptor().FullName())
}

// protoFieldName is the proto name (user_id) of the field that protojson
// names by its JSON name (userId) in md or a message md holds; name itself
// if there is none.
func protoFieldName(md protoreflect.MessageDescriptor, name string) string {
	seen := map[protoreflect.FullName]bool{}
	var find func(md protoreflect.MessageDescriptor) (string, bool)
	find = func(md protoreflect.MessageDescriptor) (string, bool) {
		if seen[md.FullName()] {
			return "", false
		}
		seen[md.FullName()] = true
		fields := md.Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			if fd.JSONName() == name || string(fd.Name()) == name {
				return string(fd.Name()), true
			}
		}
		for i := range fields.Len() {
			if sub := fields.Get(i).Message(); sub != nil {
				if found, ok := find(sub); ok {
					return found, true
				}
			}
		}
		return "", false
	}
	if found, ok := find(md); ok {
		return found
	}
	return name
}
