package pipeline

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kstreamd/kstreamd/srformat"
)

// SchemaRegistryConfig is the schema_registry section: the Confluent-
// compatible Schema Registry the avro, protobuf and json_schema formats
// resolve and register schemas with (one client and schema cache per job).
// Validate reads the TLS files and the credentials it names.
type SchemaRegistryConfig struct {
	// URLs are the registry's base URLs (http:// or https://), tried in
	// order. Required when a source or sink uses a registry format, unless
	// Embedded.Enabled.
	URLs []string `yaml:"urls"`
	// TLS is how https URLs are dialed (as kafka.tls); without it https
	// uses the system's roots.
	TLS TLSConfig `yaml:"tls"`
	// BasicAuth sends HTTP basic credentials (Confluent's
	// basic.auth.user.info); exclusive with a bearer token.
	BasicAuth SchemaRegistryBasicAuth `yaml:"basic_auth"`
	// BearerTokenEnv and BearerTokenFile name where a bearer token is read
	// from (at most one): sent as "Authorization: Bearer <token>".
	BearerTokenEnv  string `yaml:"bearer_token_env"`
	BearerTokenFile string `yaml:"bearer_token_file"`
	// Timeout bounds one request to the registry. Default 10s.
	Timeout time.Duration `yaml:"timeout"`
	// Cache bounds the schemas kept by id.
	Cache SchemaRegistryCache `yaml:"cache"`
	// Retry is the back-off of requests to a registry that does not
	// answer: they are retried until it does, never skipped.
	Retry SchemaRegistryRetry `yaml:"retry"`
	// Embedded runs a development registry inside the process.
	Embedded EmbeddedSchemaRegistryConfig `yaml:"embedded"`

	// creds is what Validate read; a pointer, so fmt prints an address
	// and never a secret.
	creds *registryCreds
}

// registryCreds are the credentials Validate read.
type registryCreds struct{ password, token Secret }

// SchemaRegistryBasicAuth is schema_registry.basic_auth.
type SchemaRegistryBasicAuth struct {
	// Username is the user; required with a password.
	Username string `yaml:"username"`
	// PasswordEnv and PasswordFile name where the password is read from:
	// exactly one, when Username is set.
	PasswordEnv  string `yaml:"password_env"`
	PasswordFile string `yaml:"password_file"`
}

// SchemaRegistryCache is schema_registry.cache.
type SchemaRegistryCache struct {
	// MaxSchemas is the number of schemas kept compiled by id (ids are
	// immutable, so they never expire; the oldest is evicted). Default
	// 1000.
	MaxSchemas int `yaml:"max_schemas"`
	// NotFoundTTL is how long an id the registry does not know is
	// remembered as missing before it is asked again. Default 30s.
	NotFoundTTL time.Duration `yaml:"not_found_ttl"`
}

// SchemaRegistryRetry is schema_registry.retry.
type SchemaRegistryRetry struct {
	// MinBackoff is the first wait before a retry, doubled per failure up
	// to MaxBackoff. Defaults 100ms and 10s.
	MinBackoff time.Duration `yaml:"min_backoff"`
	MaxBackoff time.Duration `yaml:"max_backoff"`
}

// EmbeddedSchemaRegistryConfig is schema_registry.embedded: an in-process
// registry (franz-go's srfake) for development, as kafka.embedded is a
// broker; `kstreamd schema-registry` runs it alone.
type EmbeddedSchemaRegistryConfig struct {
	// Enabled starts it with the job; the job then uses it (set no urls).
	Enabled bool `yaml:"enabled"`
	// Address is where it listens. Default 127.0.0.1:8081.
	Address string `yaml:"address"`
	// DataDir keeps its schemas across restarts. Default
	// "<data_dir>/schema-registry".
	DataDir string `yaml:"data_dir"`
}

func defaultSchemaRegistry() SchemaRegistryConfig {
	return SchemaRegistryConfig{
		Timeout:  srformat.DefaultTimeout,
		Cache:    SchemaRegistryCache{MaxSchemas: srformat.DefaultCacheSize, NotFoundTTL: srformat.DefaultNotFoundTTL},
		Retry:    SchemaRegistryRetry{MinBackoff: srformat.DefaultMinBackoff, MaxBackoff: srformat.DefaultMaxBackoff},
		Embedded: EmbeddedSchemaRegistryConfig{Address: "127.0.0.1:8081"},
	}
}

// registryFormat reports whether f is a format of a Schema Registry.
func registryFormat(f string) bool { return srformat.Kind(f).Valid() }

// UsesSchemaRegistry reports whether a source or sink of c uses a Schema
// Registry format.
func (c *Config) UsesSchemaRegistry() bool {
	for i := range c.Sources {
		if registryFormat(string(c.Sources[i].Format)) {
			return true
		}
	}
	for i := range c.Sinks {
		if registryFormat(string(c.Sinks[i].Format)) {
			return true
		}
	}
	return false
}

// SchemaRegistryURLs returns schema_registry.urls, or the embedded
// registry's URL when it is enabled.
func (c *Config) SchemaRegistryURLs() []string {
	if c.SchemaRegistry.Embedded.Enabled {
		return []string{"http://" + c.SchemaRegistry.Embedded.Address}
	}
	return slices.Clone(c.SchemaRegistry.URLs)
}

// EmbeddedSchemaRegistryDataDir returns schema_registry.embedded.data_dir,
// or "<data_dir>/schema-registry".
func (c *Config) EmbeddedSchemaRegistryDataDir() string {
	if d := c.SchemaRegistry.Embedded.DataDir; d != "" {
		return d
	}
	return filepath.Join(c.DataDir, "schema-registry")
}

// RegistryConfig returns the srformat client config of the validated
// section; m (may be nil) receives its metrics.
func (s *SchemaRegistryConfig) RegistryConfig(urls []string, m *srformat.Metrics) srformat.RegistryConfig {
	rc := srformat.RegistryConfig{
		URLs: urls, Username: s.BasicAuth.Username,
		Timeout: s.Timeout, CacheSize: s.Cache.MaxSchemas, NotFoundTTL: s.Cache.NotFoundTTL,
		MinBackoff: s.Retry.MinBackoff, MaxBackoff: s.Retry.MaxBackoff, Metrics: m,
	}
	if s.creds != nil {
		rc.Password, rc.BearerToken = s.creds.password.Reveal(), s.creds.token.Reveal()
	}
	if s.TLS.Enabled && s.TLS.loaded != nil {
		rc.TLS = s.TLS.tlsConfig()
	}
	return rc
}

func (c *Config) validateSchemaRegistry(v *validator) {
	s := &c.SchemaRegistry
	const p = "schema_registry"
	if c.UsesSchemaRegistry() && len(s.URLs) == 0 && !s.Embedded.Enabled {
		need := func(path, f string) {
			// a format the program did not register is reported once, as unknown
			if _, ok := c.connectors().Format(f); ok && registryFormat(f) {
				v.errorf(path, "%s needs a schema registry: set schema_registry.urls (or schema_registry.embedded.enabled)", f)
			}
		}
		for i := range c.Sources {
			need(fmt.Sprintf("sources[%d].format", i), string(c.Sources[i].Format))
		}
		for i := range c.Sinks {
			need(fmt.Sprintf("sinks[%d].format", i), string(c.Sinks[i].Format))
		}
	}
	if s.Embedded.Enabled {
		v.hostPort(p+".embedded.address", s.Embedded.Address, true)
		if len(s.URLs) > 0 {
			v.errorf(p+".urls", "set, but schema_registry.embedded.enabled is true: the job uses the embedded registry; remove urls or disable it")
		}
		const msg = "the embedded schema registry serves neither TLS nor authentication"
		if s.TLS.Enabled {
			v.errorf(p+".tls.enabled", msg)
		}
		if s.BasicAuth.Username != "" {
			v.errorf(p+".basic_auth.username", msg)
		}
		if s.BearerTokenEnv != "" {
			v.errorf(p+".bearer_token_env", msg)
		}
		if s.BearerTokenFile != "" {
			v.errorf(p+".bearer_token_file", msg)
		}
	}
	for i, u := range s.URLs {
		path := fmt.Sprintf("%s.urls[%d]", p, i)
		pu, err := url.Parse(u)
		switch {
		case err != nil:
			v.errorf(path, "not a URL: %v", err)
		case pu.Scheme != "http" && pu.Scheme != "https":
			v.errorf(path, "must be an http:// or https:// URL, got %q", u)
		case pu.Host == "":
			v.errorf(path, "has no host: %q", u)
		case pu.Scheme == "http" && s.TLS.Enabled:
			v.errorf(path, "is http://, but schema_registry.tls.enabled is true: use https://")
		}
	}
	v.tls(p+".tls", &s.TLS)
	c.validateRegistryAuth(v)
	if s.Timeout < time.Millisecond {
		v.errorf(p+".timeout", "must be >= 1ms, got %v", s.Timeout)
	}
	if s.Cache.MaxSchemas < 1 {
		v.errorf(p+".cache.max_schemas", "must be >= 1, got %d", s.Cache.MaxSchemas)
	}
	if s.Cache.NotFoundTTL < 0 {
		v.errorf(p+".cache.not_found_ttl", "must be >= 0, got %v", s.Cache.NotFoundTTL)
	}
	if s.Retry.MinBackoff < time.Millisecond {
		v.errorf(p+".retry.min_backoff", "must be >= 1ms, got %v", s.Retry.MinBackoff)
	}
	if s.Retry.MaxBackoff < s.Retry.MinBackoff {
		v.errorf(p+".retry.max_backoff", "must be >= retry.min_backoff (%v), got %v", s.Retry.MinBackoff, s.Retry.MaxBackoff)
	}
}

func (c *Config) validateRegistryAuth(v *validator) {
	s := &c.SchemaRegistry
	const p = "schema_registry"
	s.creds = nil
	cr := &registryCreds{}
	defer func() {
		if cr.password != "" || cr.token != "" {
			s.creds = cr
		}
	}()
	b := &s.BasicAuth
	bearer := s.BearerTokenEnv != "" || s.BearerTokenFile != ""
	bearerPath := p + ".bearer_token_env"
	if s.BearerTokenEnv == "" {
		bearerPath = p + ".bearer_token_file"
	}
	// basic_auth is checked whole whenever any of its fields is set: a
	// missing username is one problem among the others, not the only one
	// reported.
	basic := b.Username != "" || b.PasswordEnv != "" || b.PasswordFile != ""
	if basic && bearer {
		v.errorf(bearerPath, "basic_auth is also set: set one of basic_auth and a bearer token")
	}
	if b.Username == "" && basic {
		v.required(p + ".basic_auth.username")
	}
	if basic {
		switch {
		case b.PasswordEnv != "" && b.PasswordFile != "":
			v.errorf(p+".basic_auth.password_file", "password_env is also set: set exactly one of password_env and password_file")
		case b.PasswordEnv == "" && b.PasswordFile == "":
			v.errorf(p+".basic_auth", "a password is required: set password_env (an environment variable) or password_file (a file)")
		default:
			cr.password = v.secret(p+".basic_auth.password_env", b.PasswordEnv, p+".basic_auth.password_file", b.PasswordFile)
		}
	}
	switch {
	case s.BearerTokenEnv != "" && s.BearerTokenFile != "":
		v.errorf(p+".bearer_token_file", "bearer_token_env is also set: set at most one of them")
	case bearer:
		cr.token = v.secret(p+".bearer_token_env", s.BearerTokenEnv, p+".bearer_token_file", s.BearerTokenFile)
	}
}

// secret reads a credential from the environment variable env or the file
// file (one of them set), reporting problems at envPath or filePath
// without repeating either value (a secret written there by mistake must
// not reach a log).
func (v *validator) secret(envPath, env, filePath, file string) Secret {
	if env != "" {
		val, set := os.LookupEnv(env)
		switch {
		case !envNameRE.MatchString(env):
			v.errorf(envPath, "must be the name of an environment variable (letters, digits and _, not starting with a digit), not the secret")
		case !set:
			v.errorf(envPath, "the environment variable it names is not set")
		case val == "":
			v.errorf(envPath, "the environment variable it names is empty")
		default:
			return Secret(val)
		}
		return ""
	}
	data, err := readRegularFile(file, maxPasswordFileBytes)
	switch val := strings.TrimRight(string(data), "\r\n"); {
	case err != nil:
		v.errorf(filePath, "cannot read the file it names: %v", pathErrReason(err))
	case val == "":
		v.errorf(filePath, "the file it names is empty")
	default:
		return Secret(val)
	}
	return ""
}
