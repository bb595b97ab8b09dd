package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// A wrongly typed value of a JSON request is refused naming its field and
// what the field takes (issue 31: `"ttl":60` answered "unexpected token
// 60"). protojson names the field for scalars only; for the rest (a
// number where a duration, a time, a list or an object goes) it gives the
// position, and these find the field there.

// fieldAt is the path of keys (user_id, metadata.note) to the JSON value
// that starts at offset in body, and the value's first token as written;
// ok is false if no value of an object starts there.
func fieldAt(body []byte, offset int64) (path []string, token string, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	type frame struct {
		object    bool
		key       string
		expectKey bool
	}
	var stack []frame
	for {
		before := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return nil, "", false
		}
		after := dec.InputOffset()
		top := len(stack) - 1
		isKey := top >= 0 && stack[top].object && stack[top].expectKey
		if d, isDelim := tok.(json.Delim); isDelim && (d == '}' || d == ']') {
			stack = stack[:top]
			if top > 0 && stack[top-1].object {
				stack[top-1].expectKey = true
			}
			continue
		}
		if isKey {
			stack[top].key, stack[top].expectKey = tok.(string), false
			continue
		}
		if offset >= before && offset < after {
			for _, f := range stack {
				if f.object {
					path = append(path, f.key)
				}
			}
			return path, strings.TrimSpace(string(body[offset:after])), len(path) > 0
		}
		if d, isDelim := tok.(json.Delim); isDelim {
			stack = append(stack, frame{object: d == '{', expectKey: d == '{'})
			continue
		}
		if top >= 0 && stack[top].object {
			stack[top].expectKey = true
		}
	}
}

// offsetOf is the byte offset of protojson's line and column (1-based).
func offsetOf(body []byte, line, column int) int64 {
	off := 0
	for l := 1; l < line; l++ {
		i := bytes.IndexByte(body[off:], '\n')
		if i < 0 {
			return -1
		}
		off += i + 1
	}
	return int64(off + column - 1)
}

// fieldForm is the proto name of the field at path in md (metadata, not
// metadata.note) and what a value there takes, in the caller's words; ok
// is false if path names no field of md.
func fieldForm(md protoreflect.MessageDescriptor, path []string) (name string, form string, ok bool) {
	var names []string
	for i := 0; i < len(path); i++ {
		fd := fieldByName(md, path[i])
		if fd == nil {
			return "", "", false
		}
		names = append(names, string(fd.Name()))
		last := i == len(path)-1
		switch {
		case fd.IsMap() && last:
			return strings.Join(names, "."), "an object of " + plural(kindForm(fd.MapValue())), true
		case fd.IsMap() && i+1 == len(path)-1: // a value of the map
			return strings.Join(names, "."), "an object of " + plural(kindForm(fd.MapValue())), true
		case fd.IsMap():
			return "", "", false
		case last && fd.IsList():
			return strings.Join(names, "."), "a list of " + plural(kindForm(fd)), true
		case last:
			return strings.Join(names, "."), kindForm(fd), true
		case fd.Message() == nil || fd.Message().FullName() == "google.protobuf.Duration" || fd.Message().FullName() == "google.protobuf.Timestamp":
			return "", "", false
		}
		md = fd.Message()
	}
	return "", "", false
}

func fieldByName(md protoreflect.MessageDescriptor, name string) protoreflect.FieldDescriptor {
	if fd := md.Fields().ByName(protoreflect.Name(name)); fd != nil {
		return fd
	}
	return md.Fields().ByJSONName(name)
}

// kindForm says what one value of fd takes.
func kindForm(fd protoreflect.FieldDescriptor) string {
	if m := fd.Message(); m != nil {
		switch m.FullName() {
		case "google.protobuf.Duration":
			return `a duration string such as "3600s"`
		case "google.protobuf.Timestamp":
			return `an RFC 3339 time string in UTC such as "2026-01-02T15:04:05Z"`
		}
		return "an object"
	}
	if fd.Kind() == protoreflect.EnumKind {
		values := fd.Enum().Values()
		if values.Len() > 1 {
			return fmt.Sprintf("the name of one of its values, such as %s", strconv.Quote(string(values.Get(1).Name())))
		}
	}
	if k, ok := jsonKinds[fd.Kind().String()]; ok {
		return k
	}
	return "a value of type " + fd.Kind().String()
}

// plural turns "a string" into "strings", `a duration string such as
// "3600s"` into `duration strings such as "3600s"`.
func plural(form string) string {
	form = strings.TrimPrefix(strings.TrimPrefix(form, "a "), "an ")
	if noun, rest, found := strings.Cut(form, " such as "); found {
		return noun + "s such as " + rest
	}
	if strings.HasPrefix(form, "the name of") || strings.HasPrefix(form, "true or") {
		return "values: " + form
	}
	return form + "s"
}
