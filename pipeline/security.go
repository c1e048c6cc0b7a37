package pipeline

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// TLSConfig is how the job's Kafka clients dial the brokers over TLS
// (Kafka's security.protocol SSL, or SASL_SSL with kafka.sasl).
//
// Validate reads and parses the files it names and keeps the result for
// ClientOptions, so a file that is missing, unreadable or not PEM is a config
// problem reported by `kstreamd validate`, and the files are read once: a
// renewed certificate takes a restart.
type TLSConfig struct {
	// Enabled dials every broker with TLS (at least TLS 1.2). Default false;
	// every other field needs it.
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM file of the certificate authorities that sign the
	// brokers' certificates. Default "": the system's roots.
	CAFile string `yaml:"ca_file"`
	// CertFile is a PEM file of the client certificate (and its chain), for
	// brokers that authenticate clients by certificate (mutual TLS). Default
	// "": no client certificate. Set both CertFile and KeyFile, or neither.
	CertFile string `yaml:"cert_file"`
	// KeyFile is the PEM private key of CertFile. Default "".
	KeyFile string `yaml:"key_file"`
	// ServerName is the host name checked against every broker's
	// certificate. Default "": the host of the broker address dialed (seed
	// or advertised).
	ServerName string `yaml:"server_name"`
	// InsecureSkipVerify accepts any broker certificate, which lets anyone
	// on the path read and change the traffic, SASL exchange included; for
	// tests only. Default false; when true, Config.LogSecurity warns at
	// start.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`

	// loaded is what Validate read from the files; nil before Validate, and
	// when Enabled is false. A pointer, so fmt prints an address and never
	// the private key.
	loaded *tlsFiles
}

// tlsFiles is the parsed content of a TLSConfig's files.
type tlsFiles struct {
	roots *x509.CertPool   // nil: the system's roots
	cert  *tls.Certificate // nil: no client certificate
}

// SASLMechanism is a Kafka SASL mechanism.
type SASLMechanism string

// SASLMechanism values.
const (
	// SASLNone leaves SASL off.
	SASLNone SASLMechanism = ""
	// SASLPlain sends the username and password as they are (RFC 4616):
	// use it over TLS only.
	SASLPlain SASLMechanism = "PLAIN"
	// SASLScramSHA256 proves the password without sending it (RFC 5802,
	// KIP-84).
	SASLScramSHA256 SASLMechanism = "SCRAM-SHA-256"
	// SASLScramSHA512 is SCRAM with SHA-512.
	SASLScramSHA512 SASLMechanism = "SCRAM-SHA-512"
)

// saslMechanisms are the SASLMechanism values kafka.sasl.mechanism may name,
// in the order messages list them.
var saslMechanisms = []string{string(SASLPlain), string(SASLScramSHA256), string(SASLScramSHA512)}

// SASLConfig is how the job's Kafka clients authenticate (Kafka's
// security.protocol SASL_PLAINTEXT, or SASL_SSL with kafka.tls). The password
// never appears in the file: it comes from an environment variable or a file,
// which Validate reads into Password.
type SASLConfig struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512. Default "": no
	// SASL; every other field needs a mechanism.
	Mechanism SASLMechanism `yaml:"mechanism"`
	// Username is the SASL user. Required with a mechanism.
	Username string `yaml:"username"`
	// PasswordEnv names the environment variable holding the password.
	// Default ""; with a mechanism, exactly one of PasswordEnv and
	// PasswordFile is required.
	PasswordEnv string `yaml:"password_env"`
	// PasswordFile is a file holding the password; trailing newlines ("\n",
	// "\r\n") are trimmed. Default "".
	PasswordFile string `yaml:"password_file"`
	// Password is the password Validate read from PasswordEnv or
	// PasswordFile (it overwrites what was there). It prints as
	// "[redacted]" (see Secret). Written in a config file, the key
	// `password` is refused: a secret does not belong in a file that is
	// committed, mounted and printed.
	Password Secret `yaml:"password"`
}

// Secret is a credential, such as a SASL password. It prints as
// "[redacted]" through every fmt verb (also inside a struct printed with %v,
// %+v or %#v), log/slog, encoding/json and encoding.TextMarshaler users such
// as yaml.v3; only Reveal returns the value. Never convert it to string to
// log it.
type Secret string

// redacted is what a Secret prints as.
const redacted = "[redacted]"

// Reveal returns the secret's value, for the code that authenticates with
// it.
func (s Secret) Reveal() string { return string(s) }

// String returns "[redacted]".
func (Secret) String() string { return redacted }

// GoString returns "[redacted]", for %#v.
func (Secret) GoString() string { return redacted }

// Format writes "[redacted]" whatever the verb and flags.
func (Secret) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, redacted) }

// MarshalJSON returns the JSON string "[redacted]".
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText returns "[redacted]".
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// LogValue returns "[redacted]" for log/slog.
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// ErrSecurityNotLoaded is returned by the dials (TLS) and the SASL
// authentication of a client built from ClientOptions of a Config whose
// kafka.tls or kafka.sasl was never loaded: a Config built in code must pass
// Validate first.
var ErrSecurityNotLoaded = errors.New("pipeline: kafka.tls and kafka.sasl are loaded by Config.Validate, which was not called")

// securityOptions returns the franz-go options of kafka.tls and kafka.sasl:
// a TLS dialer and a SASL mechanism, or none.
func (k *KafkaConfig) securityOptions() []kgo.Opt {
	var opts []kgo.Opt
	if t := &k.TLS; t.Enabled {
		if t.loaded == nil {
			opts = append(opts, kgo.Dialer(func(context.Context, string, string) (net.Conn, error) {
				return nil, ErrSecurityNotLoaded
			}))
		} else {
			opts = append(opts, kgo.DialTLSConfig(t.tlsConfig()))
		}
	}
	if m := k.SASL.mechanism(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts
}

// tlsConfig returns the client TLS config of a loaded TLSConfig. franz-go
// clones it for every dial and, when ServerName is empty, sets it to the
// host dialed.
func (t *TLSConfig) tlsConfig() *tls.Config {
	c := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		RootCAs:            t.loaded.roots,
		ServerName:         t.ServerName,
		InsecureSkipVerify: t.InsecureSkipVerify, // opt-in; LogSecurity warns
	}
	if t.loaded.cert != nil {
		c.Certificates = []tls.Certificate{*t.loaded.cert}
	}
	return c
}

// mechanism returns the franz-go SASL mechanism of s, or nil without one.
// It authenticates with the username and password s holds now.
func (s *SASLConfig) mechanism() sasl.Mechanism {
	user, pass := s.Username, s.Password
	scramAuth := func(context.Context) (scram.Auth, error) {
		if pass == "" {
			return scram.Auth{}, ErrSecurityNotLoaded
		}
		return scram.Auth{User: user, Pass: pass.Reveal()}, nil
	}
	switch s.Mechanism {
	case SASLPlain:
		return plain.Plain(func(context.Context) (plain.Auth, error) {
			if pass == "" {
				return plain.Auth{}, ErrSecurityNotLoaded
			}
			return plain.Auth{User: user, Pass: pass.Reveal()}, nil
		})
	case SASLScramSHA256:
		return scram.Sha256(scramAuth)
	case SASLScramSHA512:
		return scram.Sha512(scramAuth)
	default:
		return nil
	}
}

// LogSecurity logs how the job's Kafka clients protect their connections:
// one Info line (tls, client_certificate, sasl_mechanism), and a Warn for
// each setting that gives the protection up: kafka.tls.insecure_skip_verify,
// and SASL PLAIN without TLS, which sends the password in clear text. It
// never logs a secret. kstreamd run calls it at start.
func (c *Config) LogSecurity(logger *slog.Logger) {
	k := &c.Kafka
	mech := string(k.SASL.Mechanism)
	if mech == "" {
		mech = "none"
	}
	logger.Info("kafka client security", "tls", k.TLS.Enabled,
		"client_certificate", k.TLS.Enabled && k.TLS.CertFile != "", "sasl_mechanism", mech)
	if k.TLS.Enabled && k.TLS.InsecureSkipVerify {
		logger.Warn("kafka.tls.insecure_skip_verify is true: broker certificates are not verified, so the connection can be intercepted")
	}
	if k.SASL.Mechanism == SASLPlain && !k.TLS.Enabled {
		logger.Warn("kafka.sasl.mechanism PLAIN without kafka.tls: the password crosses the network in clear text")
	}
}

// validateSecurity checks kafka.tls and kafka.sasl, and loads what they
// name: the TLS files into TLSConfig.loaded, the password into
// SASLConfig.Password. No message includes a secret.
func (c *Config) validateSecurity(v *validator) {
	k := &c.Kafka
	k.TLS.loaded = nil
	c.validateTLS(v)
	c.validateSASL(v)
	if len(k.Brokers) == 0 && k.Embedded.Enabled {
		const msg = "the embedded broker (kafka.embedded.enabled without kafka.brokers) serves neither TLS nor SASL"
		if k.TLS.Enabled {
			v.errorf("kafka.tls.enabled", msg)
		}
		if k.SASL.Mechanism != SASLNone {
			v.errorf("kafka.sasl.mechanism", msg)
		}
	}
}

func (c *Config) validateTLS(v *validator) { v.tls("kafka.tls", &c.Kafka.TLS) }

// tls validates t, the TLS section at path (kafka.tls,
// schema_registry.tls), and loads its files.
func (v *validator) tls(path string, t *TLSConfig) {
	t.loaded = nil
	if !t.Enabled {
		for _, f := range []struct{ path, val string }{
			{path + ".ca_file", t.CAFile},
			{path + ".cert_file", t.CertFile},
			{path + ".key_file", t.KeyFile},
			{path + ".server_name", t.ServerName},
		} {
			if f.val != "" {
				v.errorf(f.path, "set, but %s.enabled is false: set enabled: true to dial with TLS", path)
			}
		}
		if t.InsecureSkipVerify {
			v.errorf(path+".insecure_skip_verify", "set, but %s.enabled is false: set enabled: true to dial with TLS", path)
		}
		return
	}
	files := &tlsFiles{}
	ok := true
	if t.CAFile != "" {
		data, err := v.readFile(path+".ca_file", t.CAFile)
		files.roots = x509.NewCertPool()
		switch {
		case err != nil:
			ok = false
		case !files.roots.AppendCertsFromPEM(data):
			v.errorf(path+".ca_file", "no PEM certificate in %q", t.CAFile)
			ok = false
		}
	}
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		v.errorf(path+".cert_file", "needs %s.key_file: set both or neither", path)
		ok = false
	case t.CertFile == "" && t.KeyFile != "":
		v.errorf(path+".key_file", "needs %s.cert_file: set both or neither", path)
		ok = false
	case t.CertFile != "":
		certPEM, certErr := v.readFile(path+".cert_file", t.CertFile)
		keyPEM, keyErr := v.readFile(path+".key_file", t.KeyFile)
		if certErr != nil || keyErr != nil {
			ok = false
			break
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			// crypto/tls's messages name what is wrong, never key bytes.
			v.errorf(path+".cert_file", "client certificate %q with key %q: %v", t.CertFile, t.KeyFile, err)
			ok = false
			break
		}
		files.cert = &cert
	}
	if ok {
		t.loaded = files
	}
}

func (c *Config) validateSASL(v *validator) {
	s := &c.Kafka.SASL
	// An inline password: the key written in the file, or, in a Config
	// built in code, a Password that no password_env or password_file
	// explains.
	_, inline := v.c.src.keyWritten("kafka.sasl.password")
	if v.c.src == nil && s.Password != "" && s.PasswordEnv == "" && s.PasswordFile == "" {
		inline = true
	}
	if inline {
		v.errorf("kafka.sasl.password", "an inline password is refused: put it in an environment variable named by password_env, or a file named by password_file")
	}
	if s.Mechanism == SASLNone {
		for _, f := range []struct{ path, val string }{
			{"kafka.sasl.username", s.Username},
			{"kafka.sasl.password_env", s.PasswordEnv},
			{"kafka.sasl.password_file", s.PasswordFile},
		} {
			if f.val != "" {
				v.errorf(f.path, "set, but kafka.sasl.mechanism is empty (no SASL): set mechanism to one of %s", strings.Join(saslMechanisms, ", "))
			}
		}
		s.Password = ""
		return
	}
	v.saslMechanism(string(s.Mechanism))
	if s.Username == "" {
		v.required("kafka.sasl.username")
	}
	s.Password = ""
	switch {
	case s.PasswordEnv != "" && s.PasswordFile != "":
		v.errorf("kafka.sasl.password_file", "password_env is also set: set exactly one of password_env and password_file")
	// The messages below do not repeat password_env or password_file: a
	// password written there by mistake must not reach a log either.
	case s.PasswordEnv != "":
		val, set := os.LookupEnv(s.PasswordEnv)
		switch {
		case !envNameRE.MatchString(s.PasswordEnv):
			v.errorf("kafka.sasl.password_env", "must be the name of an environment variable (letters, digits and _, not starting with a digit), not the password")
		case !set:
			v.errorf("kafka.sasl.password_env", "the environment variable it names is not set")
		case val == "":
			v.errorf("kafka.sasl.password_env", "the environment variable it names is empty")
		default:
			s.Password = Secret(val)
		}
	case s.PasswordFile != "":
		data, err := readRegularFile(s.PasswordFile, maxPasswordFileBytes)
		switch pw := strings.TrimRight(string(data), "\r\n"); {
		case err != nil:
			v.errorf("kafka.sasl.password_file", "cannot read the file it names: %v", pathErrReason(err))
		case pw == "":
			v.errorf("kafka.sasl.password_file", "the file it names is empty")
		default:
			s.Password = Secret(pw)
		}
	case !inline:
		v.errorf("kafka.sasl", "a password is required: set password_env (an environment variable) or password_file (a file)")
	}
}

// saslMechanism reports a kafka.sasl.mechanism that is not one of
// saslMechanisms, suggesting the closest regardless of case (Kafka's names
// are upper case).
func (v *validator) saslMechanism(m string) {
	const path = "kafka.sasl.mechanism"
	if slices.Contains(saslMechanisms, m) {
		return
	}
	want := strings.Join(saslMechanisms, ", ")
	lower := make([]string, len(saslMechanisms))
	for i, known := range saslMechanisms {
		lower[i] = strings.ToLower(known)
	}
	if i := slices.Index(lower, suggest(m, lower)); i >= 0 {
		v.errorf(path, "unknown value %q (did you mean %q?); want one of %s", m, saslMechanisms[i], want)
		return
	}
	v.errorf(path, "unknown value %q; want one of %s", m, want)
}

// readFile reads the file a field names, reporting a failure at path as
// "cannot read NAME: REASON" (without the operation and path os adds).
func (v *validator) readFile(path, name string) ([]byte, error) {
	data, err := readRegularFile(name, maxPEMFileBytes)
	if err != nil {
		v.errorf(path, "cannot read %q: %v", name, pathErrReason(err))
	}
	return data, err
}

// Bounds on the files validation reads.
const (
	maxPEMFileBytes      = 8 << 20
	maxPasswordFileBytes = 64 << 10
)

// errNotRegular and errTooLarge are why readRegularFile refuses a file.
var (
	errNotRegular = errors.New("not a regular file")
	errTooLarge   = errors.New("file too large")
)

// readRegularFile reads the regular file name (a symbolic link to one is
// fine), of at most limit bytes. A device, FIFO or directory is refused
// before it is opened, so that validation never blocks (a FIFO's open
// waits for a writer) nor reads without end (/dev/zero).
func readRegularFile(name string, limit int64) ([]byte, error) {
	fi, err := os.Stat(name)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errNotRegular
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: more than %d bytes", errTooLarge, limit)
	}
	return data, nil
}

// pathErrReason returns the reason of an os error, without the operation
// and path it names.
func pathErrReason(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// envNameRE matches a portable environment variable name (POSIX).
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
