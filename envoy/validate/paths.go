// Naming each fault by its path in the YAML, as a user reads the file.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// protojson's errors start "proto: (line 1:COLUMN): ", with a space or a no-break space.
var position = regexp.MustCompile(`^proto:[\s\x{00a0}]*\(line 1:(\d+)\):\s*`)

// locate names the YAML path of a protojson fault, such as
// static_resources.clusters[0].type: invalid value for enum field type: "STRICT_DSN". protojson
// gives only a column in the one-line JSON that YAMLToJSON made, which means nothing to whoever
// edits the YAML; so read that JSON again, token by token, up to the column.
func locate(doc []byte, err error) string {
	message := err.Error()
	if strings.Contains(message, "unable to resolve") {
		message += " (if it is a real Envoy type, add its package to the imports in envoy/validate/main.go)"
	}
	match := position.FindStringSubmatch(message)
	if match == nil {
		return message
	}
	message = message[len(match[0]):]
	column, _ := strconv.Atoi(match[1])
	offset := 0 // protojson counts columns in runes, json.Decoder counts bytes
	for n := 1; n < column && offset < len(doc); n++ {
		_, size := utf8.DecodeRune(doc[offset:])
		offset += size
	}

	// One frame per open object (the key whose value is being read) or array (the element's index).
	type frame struct {
		key          string
		index        int
		array, keyed bool
	}
	var stack []*frame
	decoder := json.NewDecoder(bytes.NewReader(doc))
	for int(decoder.InputOffset()) <= offset {
		token, terr := decoder.Token()
		if terr != nil {
			return message
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.array && token != json.Delim(']') {
			top.index++
		}
		completes := true // a scalar or a closing bracket ends a member of the object around it
		switch token {
		case json.Delim('{'), json.Delim('['):
			stack, completes = append(stack, &frame{index: -1, array: token == json.Delim('[')}), false
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		default:
			if top != nil && !top.array && !top.keyed {
				top.key, top.keyed, completes = token.(string), true, false
			}
		}
		if completes && len(stack) > 0 && int(decoder.InputOffset()) <= offset {
			stack[len(stack)-1].keyed = false
		}
	}
	var path strings.Builder
	for _, f := range stack {
		if f.array {
			fmt.Fprintf(&path, "[%d]", f.index)
		} else if f.keyed {
			if path.Len() > 0 {
				path.WriteByte('.')
			}
			path.WriteString(f.key)
		}
	}
	return path.String() + ": " + message
}

// flatten turns protoc-gen-validate's chains of "embedded message failed validation | caused by"
// into one fault per field, with its Go field names put back into the YAML's snake_case.
func flatten(err error, path string, report func(path, reason string)) {
	if multi, ok := err.(interface{ AllErrors() []error }); ok {
		for _, e := range multi.AllErrors() {
			flatten(e, path, report)
		}
		return
	}
	field, ok := err.(interface {
		Field() string
		Reason() string
		Cause() error
	})
	if !ok {
		report(path, err.Error())
		return
	}
	path = strings.TrimPrefix(path+"."+snakeCase(field.Field()), ".")
	if _, nested := field.Cause().(interface{ AllErrors() []error }); nested {
		flatten(field.Cause(), path, report)
	} else if field.Cause() != nil {
		report(path, field.Reason()+": "+field.Cause().Error())
	} else {
		report(path, field.Reason())
	}
}

// snakeCase turns "ConnectTimeout[0]" into "connect_timeout[0]", leaving an index or map key as is.
func snakeCase(goName string) string {
	var b strings.Builder
	for i, r := range goName {
		if r == '[' {
			b.WriteString(goName[i:])
			break
		}
		if unicode.IsUpper(r) && i > 0 {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}
