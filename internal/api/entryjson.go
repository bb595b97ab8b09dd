package api

import (
	"encoding/json"
	"math/bits"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pointledger/pointledger/gen/pointledger/v1"
	"github.com/pointledger/pointledger/internal/ledger"
)

// EntryJSON is e exactly as the API's JSON shows it (ListEntries, a
// mutation's entry): the event bodies' data.entry, so that a receiver reads
// the entry it would read from the API. It is compact JSON.
//
// It is written by appendMessage, straight from the message's fields in
// the order and the forms protojson gives them with the API's options
// (proto names, default values emitted, compact), without protojson's
// machinery: the dispatcher encodes every event's entry (issue 37). What
// appendMessage does not write exactly as protojson would (a string that
// is not valid UTF-8, a timestamp out of protojson's range, a field of a
// kind it does not know) goes through the API's JSON codec instead, which
// is the reference: TestEntryJSONIsTheCodecsJSON holds that both give the
// same bytes.
func EntryJSON(e ledger.Entry) (json.RawMessage, error) {
	m := entryToProto(e)
	if b, ok := appendMessage(make([]byte, 0, 512), m.ProtoReflect(), entryPlan); ok {
		return b, nil
	}
	return entryJSONByCodec(m)
}

// entryJSONByCodec is the entry as the API's JSON codec writes it.
func entryJSONByCodec(m *pb.Entry) (json.RawMessage, error) {
	b, err := jsonCodec{name: "json"}.Marshal(m)
	if err != nil {
		return nil, err
	}
	return json.RawMessage(b), nil
}

// entryPlan is how appendMessage writes an Entry; nil if one of its
// fields is of a kind it does not write (then every entry goes through
// the codec).
var entryPlan = planOf((&pb.Entry{}).ProtoReflect().Descriptor())

// messagePlan is a message's fields in declaration order (protojson's
// order), each with its JSON name written out and how to write its value.
type messagePlan struct {
	fields []fieldPlan
}

type fieldPlan struct {
	fd       protoreflect.FieldDescriptor
	name     string // `"name":`
	presence bool   // written only when set (protojson's EmitDefaultValues leaves out an unset message)
	sub      *messagePlan
	enum     protoreflect.EnumValueDescriptors
}

var timestampName = (&timestamppb.Timestamp{}).ProtoReflect().Descriptor().FullName()

// planOf is md's plan, or nil if it has a field appendMessage cannot
// write as protojson does: floats, bytes, extensions' kin, well-known types
// but Timestamp, maps other than string to string.
func planOf(md protoreflect.MessageDescriptor) *messagePlan {
	p := &messagePlan{}
	fds := md.Fields()
	for i := range fds.Len() {
		fd := fds.Get(i)
		f := fieldPlan{fd: fd, name: strconv.Quote(fd.TextName()) + ":", presence: fd.HasPresence() || fd.ContainingOneof() != nil}
		switch {
		case fd.IsMap():
			if fd.MapKey().Kind() != protoreflect.StringKind || fd.MapValue().Kind() != protoreflect.StringKind {
				return nil
			}
		case !scalarKnown(fd):
			return nil
		}
		if fd.Kind() == protoreflect.EnumKind {
			f.enum = fd.Enum().Values()
		}
		if fd.Kind() == protoreflect.MessageKind && !fd.IsMap() && fd.Message().FullName() != timestampName {
			if f.sub = planOf(fd.Message()); f.sub == nil {
				return nil
			}
		}
		p.fields = append(p.fields, f)
	}
	return p
}

func scalarKnown(fd protoreflect.FieldDescriptor) bool {
	switch fd.Kind() {
	case protoreflect.StringKind, protoreflect.BoolKind, protoreflect.Int64Kind, protoreflect.Int32Kind:
		return true
	case protoreflect.EnumKind:
		return fd.Enum().FullName() != "google.protobuf.NullValue"
	case protoreflect.MessageKind:
		name := fd.Message().FullName()
		return name == timestampName || !isWellKnown(name)
	case protoreflect.Sint32Kind, protoreflect.Uint32Kind, protoreflect.Sint64Kind, protoreflect.Uint64Kind,
		protoreflect.Sfixed32Kind, protoreflect.Fixed32Kind, protoreflect.Sfixed64Kind, protoreflect.Fixed64Kind,
		protoreflect.FloatKind, protoreflect.DoubleKind, protoreflect.BytesKind, protoreflect.GroupKind:
		// Not written here: planOf leaves such a message to protojson.
	}
	return false
}

func isWellKnown(name protoreflect.FullName) bool {
	return name.Parent() == "google.protobuf"
}

// appendMessage appends m as protojson writes it with the API's options
// (UseProtoNames, EmitDefaultValues), compacted; ok is false if it holds
// what only protojson writes right (see EntryJSON).
func appendMessage(b []byte, m protoreflect.Message, p *messagePlan) ([]byte, bool) {
	if p == nil {
		return b, false
	}
	b = append(b, '{')
	first := true
	for i := range p.fields {
		f := &p.fields[i]
		if f.presence && !m.Has(f.fd) {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, f.name...)
		v := m.Get(f.fd)
		var ok bool
		switch {
		case f.fd.IsMap():
			b, ok = appendStringMap(b, v.Map())
		case f.fd.IsList():
			b, ok = appendList(b, v.List(), f)
		default:
			b, ok = appendSingular(b, v, f)
		}
		if !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

func appendList(b []byte, l protoreflect.List, f *fieldPlan) ([]byte, bool) {
	b = append(b, '[')
	for i := range l.Len() {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = appendSingular(b, l.Get(i), f); !ok {
			return b, false
		}
	}
	return append(b, ']'), true
}

// appendStringMap writes a map<string, string> with its keys in order, as
// protojson does.
func appendStringMap(b []byte, m protoreflect.Map) ([]byte, bool) {
	keys := make([]string, 0, m.Len())
	m.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, k.String())
		return true
	})
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = appendProtoString(b, k); !ok {
			return b, false
		}
		b = append(b, ':')
		if b, ok = appendProtoString(b, m.Get(protoreflect.ValueOfString(k).MapKey()).String()); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

func appendSingular(b []byte, v protoreflect.Value, f *fieldPlan) ([]byte, bool) {
	switch f.fd.Kind() {
	case protoreflect.StringKind:
		return appendProtoString(b, v.String())
	case protoreflect.BoolKind:
		return strconv.AppendBool(b, v.Bool()), true
	case protoreflect.Int64Kind:
		b = append(b, '"')
		return append(strconv.AppendInt(b, v.Int(), 10), '"'), true
	case protoreflect.Int32Kind:
		return strconv.AppendInt(b, v.Int(), 10), true
	case protoreflect.EnumKind:
		if d := f.enum.ByNumber(v.Enum()); d != nil {
			return appendProtoString(b, string(d.Name()))
		}
		return strconv.AppendInt(b, int64(v.Enum()), 10), true
	case protoreflect.MessageKind:
		if f.sub != nil {
			return appendMessage(b, v.Message(), f.sub)
		}
		ts, ok := v.Message().Interface().(*timestamppb.Timestamp)
		if !ok {
			return b, false
		}
		return appendTimestamp(b, ts.GetSeconds(), ts.GetNanos())
	case protoreflect.Sint32Kind, protoreflect.Uint32Kind, protoreflect.Sint64Kind, protoreflect.Uint64Kind,
		protoreflect.Sfixed32Kind, protoreflect.Fixed32Kind, protoreflect.Sfixed64Kind, protoreflect.Fixed64Kind,
		protoreflect.FloatKind, protoreflect.DoubleKind, protoreflect.BytesKind, protoreflect.GroupKind:
		// Not written here: planOf leaves such a message to protojson.
	}
	return b, false
}

// protojson's bounds of a Timestamp: 0001-01-01 to 9999-12-31.
const (
	minTimestampSeconds = -62135596800
	maxTimestampSeconds = 253402300799
)

// appendTimestamp writes a Timestamp as protojson does: RFC 3339 in UTC,
// with 0, 3, 6 or 9 fractional digits.
func appendTimestamp(b []byte, secs int64, nanos int32) ([]byte, bool) {
	if secs < minTimestampSeconds || secs > maxTimestampSeconds || nanos < 0 || nanos >= 1e9 {
		return b, false
	}
	b = append(b, '"')
	start := len(b)
	b = time.Unix(secs, int64(nanos)).UTC().AppendFormat(b, "2006-01-02T15:04:05.000000000")
	for range 2 {
		if n := len(b); string(b[n-3:]) == "000" {
			b = b[:n-3]
		}
	}
	if n := len(b); n-start > 4 && string(b[n-4:]) == ".000" {
		b = b[:n-4]
	}
	return append(b, 'Z', '"'), true
}

// appendProtoString writes s as protojson does (its appendString): ", \
// and control characters escaped, the rest as it is; ok is false for a
// string that is not valid UTF-8, which protojson refuses.
func appendProtoString(b []byte, s string) ([]byte, bool) {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				return b, false
			}
			i += n
			continue
		}
		if c >= ' ' && c != '"' && c != '\\' {
			i++
			continue
		}
		b = append(b, s[start:i]...)
		b = append(b, '\\')
		switch c {
		case '"', '\\':
			b = append(b, c)
		case '\b':
			b = append(b, 'b')
		case '\f':
			b = append(b, 'f')
		case '\n':
			b = append(b, 'n')
		case '\r':
			b = append(b, 'r')
		case '\t':
			b = append(b, 't')
		default:
			b = append(b, 'u')
			b = append(b, "0000"[1+(bits.Len32(uint32(c))-1)/4:]...)
			b = strconv.AppendUint(b, uint64(c), 16)
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"'), true
}
