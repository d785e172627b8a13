package directory

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"
)

// Encode writes d in format (JSON, YAML or JSONL) so that Parse reads it
// back as d: `herald directory export`. JSON is indented, YAML keeps the
// JSON's field order in block style, and JSONL writes one entry a line
// ({"recipient": {...}}, then groups, members, preferences, settings), the
// form for large directories.
func Encode(w io.Writer, d *Directory, format Format) error {
	switch format {
	case JSON, "":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(d)
	case YAML:
		b, err := json.Marshal(d)
		if err != nil {
			return err
		}
		// JSON is YAML: read it as a node tree (which keeps the field
		// order) and write it back in block style.
		var doc yaml.Node
		if err := yaml.Unmarshal(b, &doc); err != nil {
			return err
		}
		blockStyle(&doc)
		enc := yaml.NewEncoder(w)
		enc.SetIndent(2)
		if err := enc.Encode(&doc); err != nil {
			return err
		}
		return enc.Close()
	case JSONL:
		bw := bufio.NewWriter(w)
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		line := func(kind string, v any) error {
			buf.Reset()
			if err := enc.Encode(map[string]any{kind: v}); err != nil {
				return err
			}
			_, err := bw.Write(buf.Bytes())
			return err
		}
		for _, r := range d.Recipients {
			if err := line("recipient", r); err != nil {
				return err
			}
		}
		for _, g := range d.Groups {
			if err := line("group", g); err != nil {
				return err
			}
		}
		for _, m := range d.Members {
			if err := line("member", m); err != nil {
				return err
			}
		}
		for _, p := range d.Preferences {
			if err := line("preference", p); err != nil {
				return err
			}
		}
		for _, s := range d.Settings {
			if err := line("setting", s); err != nil {
				return err
			}
		}
		return bw.Flush()
	}
	return fmt.Errorf("format %q: want json, yaml or jsonl", format)
}

// blockStyle clears the flow style JSON input gives every node, and
// quotes strings only where YAML needs it.
func blockStyle(n *yaml.Node) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		n.Style = 0
	} else {
		n.Style &^= yaml.FlowStyle
	}
	for _, c := range n.Content {
		blockStyle(c)
	}
}
