package pipeline

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstreamd/kstreamd/srformat"
)

// registryYAML is a minimal job with srExtra (indented two spaces) as its
// schema_registry section.
func registryYAML(srExtra string) string {
	return fmt.Sprintf(`job:
  name: sr
kafka:
  brokers: [127.0.0.1:9092]
sources:
  - name: in
    topic: in
sinks:
  - name: out
    input: in
    topic: out
schema_registry:
%s
`, srExtra)
}

// TestValidateSchemaRegistry: every problem of the schema_registry section
// is reported at its FILE:LINE:COL, by Parse (run) and Validate alike.
func TestValidateSchemaRegistry(t *testing.T) {
	t.Setenv("SR_PASSWORD", "pw")
	t.Setenv("SR_EMPTY", "")
	tokenFile := writeSecret(t, "tok\n")
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"bad urls", `  urls: ["ftp://x:1", "http://", "::"]`, []string{
			`sr.yaml:13:10: schema_registry.urls[0]: must be an http:// or https:// URL, got "ftp://x:1"`,
			`sr.yaml:13:23: schema_registry.urls[1]: has no host: "http://"`,
			`sr.yaml:13:34: schema_registry.urls[2]: not a URL`}},
		{"http with tls", "  urls: [http://sr:8081]\n  tls:\n    enabled: true", []string{
			"sr.yaml:13:10: schema_registry.urls[0]: is http://, but schema_registry.tls.enabled is true: use https://"}},
		{"tls off with file", "  urls: [https://sr:8081]\n  tls:\n    ca_file: /nope", []string{
			"sr.yaml:15:5: schema_registry.tls.ca_file: set, but schema_registry.tls.enabled is false"}},
		{"tls missing ca", "  urls: [https://sr:8081]\n  tls:\n    enabled: true\n    ca_file: /nope/ca.pem", []string{
			`sr.yaml:16:5: schema_registry.tls.ca_file: cannot read "/nope/ca.pem"`}},
		{"basic and bearer", "  urls: [http://sr:8081]\n  basic_auth:\n    username: u\n    password_env: SR_PASSWORD\n  bearer_token_file: " + tokenFile, []string{
			"sr.yaml:17:3: schema_registry.bearer_token_file: basic_auth is also set"}},
		{"basic without password", "  urls: [http://sr:8081]\n  basic_auth:\n    username: u", []string{
			"sr.yaml:14:3: schema_registry.basic_auth: a password is required"}},
		{"password without user", "  urls: [http://sr:8081]\n  basic_auth:\n    password_env: SR_PASSWORD", []string{
			"schema_registry.basic_auth.username: required field is missing"}},
		{"password without user, and every other problem", "  urls: [http://sr:8081]\n  basic_auth:\n    password_env: SR_PASSWORD\n    password_file: /x\n  bearer_token_file: " + tokenFile, []string{
			"schema_registry.basic_auth.username: required field is missing",
			"sr.yaml:16:5: schema_registry.basic_auth.password_file: password_env is also set",
			"sr.yaml:17:3: schema_registry.bearer_token_file: basic_auth is also set"}},
		{"password without user, unset env", "  urls: [http://sr:8081]\n  basic_auth:\n    password_env: SR_NOPE", []string{
			"schema_registry.basic_auth.username: required field is missing",
			"sr.yaml:15:5: schema_registry.basic_auth.password_env: the environment variable it names is not set"}},
		{"empty env", "  urls: [http://sr:8081]\n  bearer_token_env: SR_EMPTY", []string{
			"sr.yaml:14:3: schema_registry.bearer_token_env: the environment variable it names is empty"}},
		{"numbers", "  urls: [http://sr:8081]\n  timeout: 0s\n  cache:\n    max_schemas: 0\n    not_found_ttl: -1s\n  retry:\n    min_backoff: 1s\n    max_backoff: 10ms", []string{
			"sr.yaml:14:3: schema_registry.timeout: must be >= 1ms, got 0s",
			"sr.yaml:16:5: schema_registry.cache.max_schemas: must be >= 1, got 0",
			"sr.yaml:17:5: schema_registry.cache.not_found_ttl: must be >= 0, got -1s",
			"sr.yaml:20:5: schema_registry.retry.max_backoff: must be >= retry.min_backoff (1s), got 10ms"}},
		{"embedded with urls and auth", "  urls: [http://sr:8081]\n  embedded:\n    enabled: true\n    address: nope\n  bearer_token_file: " + tokenFile, []string{
			"schema_registry.urls: set, but schema_registry.embedded.enabled is true",
			"schema_registry.embedded.address",
			"schema_registry.bearer_token_file: the embedded schema registry serves neither TLS nor authentication"}},
		{"unknown key", "  urls: [http://sr:8081]\n  cache:\n    max_schema: 3", []string{
			"sr.yaml:15:5: schema_registry.cache.max_schema: unknown field (did you mean \"max_schemas\"?)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("sr.yaml", []byte(registryYAML(tc.yaml)), nil)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\nlacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "pw") && !strings.Contains(tc.yaml, "pw") {
				t.Errorf("a secret is in the error: %v", err)
			}
		})
	}
}

// TestSchemaRegistryRegistryConfig: a valid section becomes the srformat
// client config, with credentials read and defaults applied.
func TestSchemaRegistryRegistryConfig(t *testing.T) {
	t.Setenv("SR_PASSWORD", "s3cret")
	cfg, err := Parse("sr.yaml", []byte(registryYAML("  urls: [http://a:8081, https://b:8081]\n  basic_auth:\n    username: u\n    password_env: SR_PASSWORD\n  cache:\n    max_schemas: 5")), nil)
	if err != nil {
		t.Fatal(err)
	}
	m := srformat.NewMetrics(nil)
	rc := cfg.SchemaRegistry.RegistryConfig(cfg.SchemaRegistryURLs(), m)
	want := srformat.RegistryConfig{URLs: []string{"http://a:8081", "https://b:8081"}, Username: "u", Password: "s3cret",
		Timeout: 10 * time.Second, CacheSize: 5, NotFoundTTL: 30 * time.Second, MinBackoff: 100 * time.Millisecond, MaxBackoff: 10 * time.Second, Metrics: m}
	if fmt.Sprintf("%+v", rc) != fmt.Sprintf("%+v", want) {
		t.Fatalf("got  %+v\nwant %+v", rc, want)
	}
	if s := fmt.Sprintf("%v %+v %#v", cfg.SchemaRegistry, cfg.SchemaRegistry, cfg.SchemaRegistry); strings.Contains(s, "s3cret") {
		t.Fatal("the password prints")
	}
	emb, err := Parse("sr.yaml", []byte(registryYAML("  embedded:\n    enabled: true\n    address: 127.0.0.1:18081")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if u := emb.SchemaRegistryURLs(); len(u) != 1 || u[0] != "http://127.0.0.1:18081" {
		t.Fatalf("embedded urls %v", u)
	}
	if d := emb.EmbeddedSchemaRegistryDataDir(); d != "data/schema-registry" {
		t.Fatalf("embedded data dir %s", d)
	}
}

// TestRegistryFormatNeedsRegistry: a source or sink format of a Schema
// Registry without schema_registry.urls (or the embedded registry) is
// refused at the format, and format_params are decoded strictly.
func TestRegistryFormatNeedsRegistry(t *testing.T) {
	const y = `job:
  name: sr
kafka:
  brokers: [127.0.0.1:9092]
sources:
  - name: in
    topic: in
    format: avro
sinks:
  - name: out
    input: in
    topic: out
    format: protobuf
    format_params:
      subjct: x
`
	_, err := Parse("sr.yaml", []byte(y), nil)
	for _, w := range []string{
		"sr.yaml:8:5: sources[0].format: avro needs a schema registry: set schema_registry.urls (or schema_registry.embedded.enabled)",
		"sr.yaml:13:5: sinks[0].format: protobuf needs a schema registry",
		`sr.yaml:15:7: sinks[0].format_params.subjct: unknown field (did you mean "subject"?)`,
	} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("error\n%v\nlacks %q", err, w)
		}
	}
	ok := strings.Replace(y, "      subjct: x\n", "      subject: x\n", 1) + "schema_registry:\n  urls: [http://127.0.0.1:8081]\n"
	cfg, err := Parse("sr.yaml", []byte(ok), nil)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cfg.Plan()
	if err != nil {
		t.Fatal(err)
	}
	rc, isRC := g.Sections[srformat.SectionName].(srformat.RegistryConfig)
	if !isRC || len(rc.URLs) != 1 || rc.URLs[0] != "http://127.0.0.1:8081" {
		t.Fatalf("sections %+v", g.Sections)
	}
	if p, _ := g.Sinks[0].FormatParams.(*srformat.Params); p == nil || p.Subject != "x" {
		t.Fatalf("sink format params %+v", g.Sinks[0].FormatParams)
	}
}

// TestRegistryFormatParamsByRole: format_params a role does not use are
// refused at validation with FILE:LINE:COL: before, a protobuf source with
// a schema passed validate and failed the job at start, and a source's
// subject, auto_register and message and an avro sink's message were
// silently ignored.
func TestRegistryFormatParamsByRole(t *testing.T) {
	const y = `job:
  name: sr
kafka:
  brokers: [127.0.0.1:9092]
schema_registry:
  urls: [http://127.0.0.1:8081]
sources:
  - name: in
    topic: in
    format: protobuf
    format_params:
      schema: 'syntax = "proto3"; message A {}'
      subject: in-value
      auto_register: true
      message: a.A
  - name: in2
    topic: in2
    format: avro
    format_params:
      schema: '"string"'
sinks:
  - name: out
    input: in
    topic: out
    format: avro
    format_params:
      message: a.A
  - name: out2
    input: in2
    topic: out2
    format: protobuf
    format_params:
      message: a.A
`
	_, err := Parse("sr.yaml", []byte(y), nil)
	var errs ConfigErrors
	if !errors.As(err, &errs) {
		t.Fatalf("error %v, want ConfigErrors", err)
	}
	want := []string{
		"sr.yaml:12:7: sources[0].format_params.schema: a reader schema applies to avro sources only; a protobuf source reads each value with the schema its id names",
		"sr.yaml:13:7: sources[0].format_params.subject: applies to sinks only: a source reads each value with the schema its id names",
		"sr.yaml:14:7: sources[0].format_params.auto_register: applies to sinks only: a source registers no schema",
		"sr.yaml:15:7: sources[0].format_params.message: applies to protobuf sinks only: a source reads the message its value's indexes name",
		"sr.yaml:27:7: sinks[0].format_params.message: applies to protobuf sinks only, not to avro",
	}
	if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, want) {
		t.Fatalf("errors\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRegistryFormatSchemaCompiledAtValidation: a sink's schema (which
// names no references) and an avro source's reader schema are compiled by
// validate, which reported "ok" for a schema the job then failed on at its
// first record.
func TestRegistryFormatSchemaCompiledAtValidation(t *testing.T) {
	const y = `job:
  name: sr
kafka:
  brokers: [127.0.0.1:9092]
schema_registry:
  urls: [http://127.0.0.1:8081]
sources:
  - name: in
    topic: in
    format: avro
    format_params:
      schema: '{"type": "recrd"}'
sinks:
  - name: a
    input: in
    topic: a
    format: avro
    format_params:
      schema: '{"type": "record", "name": "X", "fields": [{"name": "a", "type": "strin"}]}'
  - name: j
    input: in
    topic: j
    format: json_schema
    format_params:
      schema: '{not json'
  - name: p
    input: in
    topic: p
    format: protobuf
    format_params:
      schema: 'syntax = "proto3"; message A { string a = 1; }'
      message: B
  - name: ok
    input: in
    topic: ok
    format: protobuf
    format_params:
      schema: 'syntax = "proto3"; package s; message A { string a = 1; } message B { A a = 1; }'
      message: s.B
`
	_, err := Parse("sr.yaml", []byte(y), nil)
	var errs ConfigErrors
	if !errors.As(err, &errs) {
		t.Fatalf("error %v, want ConfigErrors", err)
	}
	got := strings.Split(err.Error(), "\n")
	prefixes := []string{
		"sr.yaml:12:7: sources[0].format_params.schema: the avro reader schema does not compile: ",
		"sr.yaml:19:7: sinks[0].format_params.schema: the avro schema does not compile: ",
		"sr.yaml:25:7: sinks[1].format_params.schema: the json_schema schema does not compile: the schema is not JSON",
		"sr.yaml:31:7: sinks[2].format_params.schema: the protobuf schema does not compile: the schema has no message B",
	}
	if len(got) != len(prefixes) {
		t.Fatalf("errors\n%s\nwant %d", err, len(prefixes))
	}
	for i, p := range prefixes {
		if !strings.HasPrefix(got[i], p) {
			t.Errorf("error %d %q, want prefix %q", i, got[i], p)
		}
	}
}
