package config

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/v2"

	"github.com/heraldhq/herald/core/internal/config/field"
	"github.com/heraldhq/herald/core/internal/secret"
)

// removedKeys are settings Herald does not read (any more), and why. A
// file or an environment that sets one loads with a warning
// (Daemon.Warnings) rather than failing, so that an upgrade does not stop
// a daemon over a setting that did nothing.
var removedKeys = map[string]string{
	"publisher.confirm_window": "no version of Herald read it: the publisher waits for the confirms of each claim before the next, " +
		"so publisher.batch_size bounds the deliveries waiting for a confirm",
}

// daemonParser is a koanf.Parser of one daemon file that records where
// each key stands.
type daemonParser interface {
	koanf.Parser
	positions() positions
}

func (p *hclParser) positions() positions  { return p.pos }
func (p *yamlParser) positions() positions { return p.pos }

// parserFor returns the parser for path's extension.
func parserFor(path string) (daemonParser, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".hcl":
		return newHCLParser(path), nil
	case ".yaml", ".yml":
		return newYAMLParser(path), nil
	}
	return nil, fmt.Errorf("%s: unknown config format %q (want .hcl, .yaml or .yml)", path, filepath.Ext(path))
}

// daemonFile is a daemon file being loaded: its name and where its keys
// stand.
type daemonFile struct {
	name string
	pos  positions
}

// at is "file:line" for key (the line of key or of the nearest block
// around it), or the file's name alone when the file does not give it.
func (f daemonFile) at(key string) string {
	if i := strings.IndexByte(key, '['); i >= 0 {
		key = key[:i]
	}
	for k := key; k != ""; {
		if line, ok := f.pos[k]; ok {
			return fmt.Sprintf("%s:%d", f.name, line)
		}
		i := strings.LastIndexByte(k, '.')
		if i < 0 {
			break
		}
		k = k[:i]
	}
	return f.name
}

// LoadDaemon reads the daemon file at path (empty: defaults only), layered
// with koanf over the defaults (DefaultDaemon) and under the HERALD_*
// environment overrides (HERALD_DATABASE_URL for database.url and so on:
// the key path upper-cased with dots as underscores; lists
// comma-separated). It resolves secret references (env:NAME, file:PATH,
// raw:TEXT) in every value of the file and of the environment, decodes
// strictly and validates; every error names the file (or the environment
// variable), the line and the key. Relative rules paths, plugins.dir, the
// amqp.tls_* files, http.admin_token_file and file: references are
// resolved against the config file's directory.
func LoadDaemon(path string) (Daemon, error) {
	settings := Settings()
	k := koanf.New(".")
	if err := k.Load(confmap.Provider(defaultsMap(settings), "."), nil); err != nil {
		return Daemon{}, err
	}
	var warnings []string
	fromFile := koanf.New(".")
	taken := map[string]map[string]any{}
	file := daemonFile{name: cmp.Or(path, "config")}
	if path != "" {
		p, err := parserFor(path)
		if err != nil {
			return Daemon{}, err
		}
		b, err := readDaemonFile(path)
		if err != nil {
			return Daemon{}, err
		}
		raw, err := p.Unmarshal(b)
		if err != nil {
			return Daemon{}, err
		}
		file.pos = p.positions()
		var errs []string
		resolveDaemonRefs(raw, filepath.Dir(path), "", file, &errs)
		if len(errs) == 0 {
			checkKeys(raw, reflect.TypeOf(Daemon{}), "", file, &errs, &warnings)
		}
		if len(errs) > 0 {
			return Daemon{}, fmt.Errorf("%s", strings.Join(errs, "; "))
		}
		// Labelled blocks (queue "notification.restaurant") may have dots
		// in their labels, which koanf would read as nesting: take them
		// out and decode them on their own.
		for _, s := range settings {
			if s.Blocks && s.index != nil {
				if m := takeKey(raw, s.Key); m != nil {
					taken[s.Key] = m
				}
			}
		}
		if err := fromFile.Load(confmap.Provider(raw, ""), nil); err != nil {
			return Daemon{}, fmt.Errorf("%s: %w", path, err)
		}
		if err := k.Merge(fromFile); err != nil {
			return Daemon{}, err
		}
	}
	overrides, envWarnings, err := envOverrides(settings, cmp.Or(filepath.Dir(path), "."))
	if err != nil {
		return Daemon{}, err
	}
	warnings = append(warnings, envWarnings...)
	if err := k.Load(confmap.Provider(overrides, "."), nil); err != nil {
		return Daemon{}, err
	}
	var d Daemon
	err = k.UnmarshalWithConf("", &d, koanf.UnmarshalConf{Tag: "koanf", DecoderConfig: decoderConfig(&d)})
	if err != nil {
		return Daemon{}, fmt.Errorf("%s: %w", cmp.Or(path, "environment"), err)
	}
	dv := reflect.ValueOf(&d).Elem()
	for _, s := range settings {
		m, ok := taken[s.Key]
		if !ok {
			continue
		}
		blocks := reflect.MakeMapWithSize(s.Type, len(m))
		for _, label := range slices.Sorted(maps.Keys(m)) {
			x := reflect.New(s.Type.Elem())
			dec, err := mapstructure.NewDecoder(decoderConfig(x.Interface()))
			if err != nil {
				return Daemon{}, err
			}
			key := s.Key + "." + label
			if err := dec.Decode(m[label]); err != nil {
				return Daemon{}, fmt.Errorf("%s: %s: %w", file.at(key), key, err)
			}
			blocks.SetMapIndex(reflect.ValueOf(label), x.Elem())
		}
		dv.FieldByIndex(s.index).Set(blocks)
	}
	if len(d.AMQP.URLs) > 0 {
		// url has a default, so only one given on purpose conflicts.
		if fromFile.Exists("amqp.url") || os.Getenv(envName("amqp.url")) != "" {
			where := "environment"
			if path != "" {
				where = file.at("amqp.url")
			}
			return Daemon{}, fmt.Errorf("%s: amqp.url and amqp.urls: give one of them (urls for the nodes of a cluster)", where)
		}
		d.AMQP.URL = d.AMQP.URLs[0]
	}
	if path != "" {
		base := filepath.Dir(path)
		for i, r := range d.Rules {
			if !filepath.IsAbs(r) {
				d.Rules[i] = filepath.Join(base, r)
			}
		}
		// Paths the file gives are relative to it; the environment's to
		// the working directory.
		for key, p := range map[string]*string{"plugins.dir": &d.Plugins.Dir, "amqp.tls_ca_file": &d.AMQP.TLSCAFile,
			"amqp.tls_cert_file": &d.AMQP.TLSCertFile, "amqp.tls_key_file": &d.AMQP.TLSKeyFile} {
			if os.Getenv(envName(key)) == "" && *p != "" && !filepath.IsAbs(*p) && fromFile.Exists(key) {
				*p = filepath.Join(base, *p)
			}
		}
		if os.Getenv(envName("http.admin_token_file")) == "" && d.HTTP.AdminTokenFile != "" && !filepath.IsAbs(d.HTTP.AdminTokenFile) {
			d.HTTP.AdminTokenFile = filepath.Join(base, d.HTTP.AdminTokenFile)
		}
		// A database URL's passfile parameter (the logins' passwords,
		// which herald db roles writes) is a path too.
		for key, p := range map[string]*string{"database.url": &d.Database.URL, "database.api_url": &d.Database.APIURL,
			"database.admin_url": &d.Database.AdminURL} {
			if os.Getenv(envName(key)) == "" && fromFile.Exists(key) {
				*p = passfileRelativeTo(base, *p)
			}
		}
	}
	if err := d.Validate(); err != nil {
		return Daemon{}, file.locate(err)
	}
	d.Warnings = warnings
	return d, nil
}

// locate prefixes each field error of a Validate with where its value
// came from: the environment variable that set it, or where its key
// stands in the file ("file:line"), or the file's name.
func (f daemonFile) locate(err error) error {
	errs, ok := err.(field.Errors)
	if !ok {
		return fmt.Errorf("%s: %w", f.name, err)
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		key, _, _ := strings.Cut(e.Field, "[")
		if env := envName(key); e.Field != "" && os.Getenv(env) != "" {
			msgs[i] = fmt.Sprintf("environment: %s (%s): %s", env, e.Field, e.Msg)
			continue
		}
		msgs[i] = f.at(e.Field) + ": " + e.Error()
	}
	return fmt.Errorf("%s", strings.Join(msgs, "; "))
}

// readDaemonFile reads a daemon file, refusing one over MaxDaemonFileSize.
func readDaemonFile(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, MaxDaemonFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > MaxDaemonFileSize {
		return nil, fmt.Errorf("%s: file larger than %d bytes (limit)", path, MaxDaemonFileSize)
	}
	return b, nil
}

// envOverrides reads the HERALD_* variable of every setting that has one,
// resolving secret references (file: relative to base) and checking the
// value's type; errors name the variable and the key.
func envOverrides(settings []Setting, base string) (map[string]any, []string, error) {
	overrides := map[string]any{}
	var errs, warnings []string
	for _, s := range settings {
		if s.Env == "" {
			continue
		}
		val, ok := os.LookupEnv(s.Env)
		if !ok {
			continue
		}
		if s.Key == "rules" {
			overrides[s.Key] = strings.Split(val, ",")
			continue
		}
		v, _, err := secret.Resolve(val, base)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s (%s): %v", s.Env, s.Key, err))
			continue
		}
		if err := checkValue(v, s.Type); err != nil {
			errs = append(errs, fmt.Sprintf("%s (%s): %v", s.Env, s.Key, err))
			continue
		}
		overrides[s.Key] = v
	}
	for _, key := range slices.Sorted(maps.Keys(removedKeys)) {
		if _, ok := os.LookupEnv(envName(key)); ok {
			warnings = append(warnings, fmt.Sprintf("environment: %s (%s) is ignored: %s; unset it", envName(key), key, removedKeys[key]))
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return nil, nil, fmt.Errorf("environment: %s", strings.Join(errs, "; "))
	}
	return overrides, warnings, nil
}

// decoderConfig is how settings are decoded into result: by koanf tag,
// strictly (an unused key is an error), durations from their text (a bare
// number is refused), lists from comma-separated text.
func decoderConfig(result any) *mapstructure.DecoderConfig {
	return &mapstructure.DecoderConfig{
		DecodeHook: mapstructure.ComposeDecodeHookFunc(
			numberNotDuration,
			mapstructure.StringToTimeDurationHookFunc(),
			mapstructure.StringToSliceHookFunc(","),
		),
		ErrorUnused:      true,
		WeaklyTypedInput: true,
		Result:           result,
		TagName:          "koanf",
	}
}

// checkKeys checks a parsed daemon file (m, under path) against struct
// type t: every key must be a setting, every section a block, every value
// of its setting's type. Errors go to errs, naming where the key stands,
// and settings no longer read are removed from m with a warning.
func checkKeys(m map[string]any, t reflect.Type, path string, f daemonFile, errs, warnings *[]string) {
	fields := settingFields(t)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		key := joinKey(path, k)
		fd, ok := fields[k]
		if !ok {
			if why, removed := removedKeys[key]; removed {
				*warnings = append(*warnings, fmt.Sprintf("%s: %s is ignored: %s; remove it", f.at(key), key, why))
				delete(m, k)
				continue
			}
			*errs = append(*errs, fmt.Sprintf("%s: %s: unknown key%s", f.at(key), key, suggest(k, fields)))
			continue
		}
		v := m[k]
		switch {
		case isSection(fd.Type):
			sub, ok := v.(map[string]any)
			if !ok {
				*errs = append(*errs, fmt.Sprintf("%s: %s: want a block (%s { ... }), got %s", f.at(key), key, k, describe(v)))
				continue
			}
			checkKeys(sub, fd.Type, key, f, errs, warnings)
		case isBlocks(fd.Type):
			sub, ok := v.(map[string]any)
			if !ok {
				*errs = append(*errs, fmt.Sprintf("%s: %s: want %s \"name\" { ... } blocks, got %s", f.at(key), key, k, describe(v)))
				continue
			}
			for _, label := range slices.Sorted(maps.Keys(sub)) {
				lkey := joinKey(key, label)
				body, ok := sub[label].(map[string]any)
				if !ok {
					*errs = append(*errs, fmt.Sprintf("%s: %s: want a %s \"%s\" { ... } block, got %s", f.at(lkey), lkey, k, label,
						describe(sub[label])))
					continue
				}
				checkKeys(body, fd.Type.Elem(), lkey, f, errs, warnings)
			}
		default:
			if err := checkValue(v, fd.Type); err != nil {
				*errs = append(*errs, fmt.Sprintf("%s: %s: %v", f.at(key), key, err))
			}
		}
	}
}

// checkValue checks that v decodes into a value of type t.
func checkValue(v any, t reflect.Type) error {
	x := reflect.New(t)
	dec, err := mapstructure.NewDecoder(decoderConfig(x.Interface()))
	if err != nil {
		return err
	}
	if err := dec.Decode(v); err != nil {
		if t == durationType {
			if _, nerr := numberNotDuration(reflect.TypeOf(v), t, v); nerr != nil {
				return nerr
			}
		}
		return fmt.Errorf("want %s, got %s", wantOf(t), describe(v))
	}
	return nil
}

// takeKey removes the value at the dotted key path from m and returns it
// (nil when m holds none or it is not a map).
func takeKey(m map[string]any, key string) map[string]any {
	parts := strings.Split(key, ".")
	for _, p := range parts[:len(parts)-1] {
		sub, ok := m[p].(map[string]any)
		if !ok {
			return nil
		}
		m = sub
	}
	last := parts[len(parts)-1]
	v, ok := m[last].(map[string]any)
	if !ok {
		return nil
	}
	delete(m, last)
	return v
}

// resolveDaemonRefs replaces every string of a parsed config file that is a
// secret reference with what it stands for, in place, and collects the
// problems (naming where the key stands) in errs.
func resolveDaemonRefs(v any, baseDir, path string, f daemonFile, errs *[]string) any {
	switch t := v.(type) {
	case string:
		val, _, err := secret.Resolve(t, baseDir)
		if err != nil {
			*errs = append(*errs, fmt.Sprintf("%s: %s: %v", f.at(path), path, err))
			return t
		}
		return val
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(t)) {
			t[k] = resolveDaemonRefs(t[k], baseDir, joinKey(path, k), f, errs)
		}
		return t
	case []any:
		for i, x := range t {
			t[i] = resolveDaemonRefs(x, baseDir, path+"["+strconv.Itoa(i)+"]", f, errs)
		}
		return t
	}
	return v
}

// numberNotDuration refuses a bare number where a duration goes: read
// weakly it would be nanoseconds (shutdown_grace = 30 meaning 30ns).
func numberNotDuration(from, to reflect.Type, data any) (any, error) {
	if to != durationType || from == nil {
		return data, nil
	}
	switch from.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16,
		reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return nil, fmt.Errorf("%v is not a duration: write it with a unit, such as \"%vs\"", data, data)
	}
	return data, nil
}

// passfileRelativeTo returns the connection URL raw with a relative
// passfile parameter made relative to base; any other raw (no passfile,
// an absolute one, a key/value string) as it is.
func passfileRelativeTo(base, raw string) string {
	if !strings.Contains(raw, "://") {
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	q := u.Query()
	pf := q.Get("passfile")
	if pf == "" || filepath.IsAbs(pf) {
		return raw
	}
	q.Set("passfile", filepath.Join(base, pf))
	u.RawQuery = q.Encode()
	return u.String()
}
