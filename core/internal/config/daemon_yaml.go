package config

import (
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// yamlParser is the koanf.Parser of YAML daemon files; it records where
// each key stands, for the loader's errors. A key given twice is an error
// (the YAML library's), aliases are expanded within the library's bounds
// and nesting is bounded by MaxDaemonDepth.
type yamlParser struct {
	filename string
	pos      positions
}

func newYAMLParser(filename string) *yamlParser {
	return &yamlParser{filename: filename, pos: positions{}}
}

// Unmarshal parses a YAML daemon file.
func (p *yamlParser) Unmarshal(src []byte) (map[string]any, error) {
	if len(src) > MaxDaemonFileSize {
		return nil, fmt.Errorf("%s: file larger than %d bytes (limit)", p.filename, MaxDaemonFileSize)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, fmt.Errorf("%s: %s", p.filename, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return map[string]any{}, nil
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return map[string]any{}, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want a mapping of settings at the top", p.filename, root.Line)
	}
	if err := p.walk(root, "", 0); err != nil {
		return nil, err
	}
	out := map[string]any{}
	if err := root.Decode(&out); err != nil {
		return nil, fmt.Errorf("%s: %s", p.filename, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	return out, nil
}

// walk records the line of every key under n (path: n's key path) and
// bounds the nesting.
func (p *yamlParser) walk(n *yaml.Node, path string, depth int) error {
	if depth > MaxDaemonDepth {
		return fmt.Errorf("%s:%d: nesting deeper than %d levels (limit)", p.filename, n.Line, MaxDaemonDepth)
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			key := joinKey(path, k.Value)
			if _, ok := p.pos[key]; !ok {
				p.pos[key] = k.Line
			}
			if err := p.walk(v, key, depth+1); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			if err := p.walk(c, path, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// Marshal is not supported: Herald never writes daemon files.
func (p *yamlParser) Marshal(map[string]any) ([]byte, error) {
	return nil, errors.New("writing YAML daemon files is not supported")
}
