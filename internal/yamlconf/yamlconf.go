// Package yamlconf reads the YAML files operators hand to Switchyard
// (tenants, deployment configs) strictly: an unknown key, a value of the
// wrong type or a failed check is refused with the file, the line and the
// key at fault, so a typo stops the process at start-up instead of being
// ignored.
//
// It decodes with gopkg.in/yaml.v3, keeping the node tree so that checks
// made after decoding can still point at a line. It holds no state and is
// safe for concurrent use.
package yamlconf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"

	"gopkg.in/yaml.v3"
)

// Error is a problem in a YAML file, located by line and key.
type Error struct {
	File string
	Line int    // 1-based; 0 when unknown
	Key  string // the key at fault, dotted from the root (e.g. tenants[1].weight); may be empty
	Msg  string
}

func (e *Error) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc += ":" + strconv.Itoa(e.Line)
	}
	if e.Key != "" {
		return fmt.Sprintf("%s: %s: %s", loc, e.Key, e.Msg)
	}
	return fmt.Sprintf("%s: %s", loc, e.Msg)
}

// File is a decoded YAML document: its name, for errors, and its root node.
type File struct {
	Name string
	Root *yaml.Node // the document's top node (a mapping for Switchyard's files)
}

// Load reads path and decodes it into v strictly: a key v has no field for
// (by its yaml tags) or a value of the wrong type is an *Error with the
// line. The File it returns keeps the node tree, for checks made after
// decoding (see Errorf). The document must be one YAML mapping.
func Load(path string, v any) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("yamlconf: %w", err)
	}
	return Decode(path, data, v)
}

// Decode is Load for data read from a file called name.
func Decode(name string, data []byte, v any) (*File, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: name, Msg: "the file is empty"}
		}
		return nil, located(name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &Error{File: name, Line: extra.Line, Msg: "more than one YAML document; keep one"}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, &Error{File: name, Line: root.Line, Msg: "the top level must be a mapping of keys to values"}
	}
	// Decoded from the text, not from the node tree: yaml.Node.Decode
	// has no KnownFields switch.
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	if err := strict.Decode(v); err != nil {
		e := located(name, err).(*Error)
		if e.Key == "" && e.Line > 0 {
			e.Key = keyAt(root, "", e.Line)
		}
		return nil, e
	}
	return &File{Name: name, Root: root}, nil
}

var lineRE = regexp.MustCompile(`^line (\d+): `)

// located turns a yaml.v3 error into *Error values naming file; a
// TypeError holding several problems keeps the first (fix it, rerun).
func located(file string, err error) error {
	var ye *Error
	if errors.As(err, &ye) {
		return ye
	}
	msg := err.Error()
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	msg = trimPrefix(msg, "yaml: ")
	e := &Error{File: file, Msg: msg}
	if m := lineRE.FindStringSubmatch(msg); m != nil {
		e.Line, _ = strconv.Atoi(m[1])
		e.Msg = msg[len(m[0]):]
	}
	return e
}

func trimPrefix(s, p string) string {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// keyAt is the dotted path of the deepest key written on line in n, or "".
func keyAt(n *yaml.Node, path string, line int) string {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			if deeper := keyAt(v, p, line); deeper != "" {
				return deeper
			}
			if k.Line == line || v.Line == line {
				return p
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if deeper := keyAt(c, path+"["+strconv.Itoa(i)+"]", line); deeper != "" {
				return deeper
			}
		}
	}
	return ""
}

// Value returns the value node of key in mapping m, and the key's node,
// or nils when m has no such key.
func Value(m *yaml.Node, key string) (val, keyNode *yaml.Node) {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1], m.Content[i]
		}
	}
	return nil, nil
}

// Errorf is an *Error at key of mapping m (the mapping's own line when
// the key is absent); path prefixes the key in the message.
func (f *File) Errorf(m *yaml.Node, path, key, format string, args ...any) error {
	e := &Error{File: f.Name, Key: key, Msg: fmt.Sprintf(format, args...)}
	if path != "" {
		e.Key = path + "." + key
		if key == "" {
			e.Key = path
		}
	}
	if _, k := Value(m, key); k != nil {
		e.Line = k.Line
	} else if m != nil {
		e.Line = m.Line
	}
	return e
}
